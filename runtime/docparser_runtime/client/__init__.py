"""Clients of a running docparser server (``docparser-runtime batch submit``).

They speak HTTP to the server's public API and import nothing of ``server``: what they send
is what any other client could send (import-linter keeps ``client`` and ``server``
independent).
"""
