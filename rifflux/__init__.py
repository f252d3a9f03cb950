"""Rifflux: local-first hybrid retrieval over markdown and text corpora."""

__version__ = "0.1.0"
