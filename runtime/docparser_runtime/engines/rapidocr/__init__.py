"""The RapidOCR engine (CPU, ONNX) and its private helpers: layout, reading order, tables,
deskew and spacing. Nothing outside this package imports the helpers."""
