"""gpupool: a self-hosted GPU pool, shared fairly and kept busy."""

__version__ = "0.1.0"
