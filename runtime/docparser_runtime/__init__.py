"""docparser runtime: the HTTP inference server that every DocParser pod runs."""

__version__ = "0.1.0"
