"""Pure preprocessing shared by every engine: safe decoding, PDF pages, tiling."""
