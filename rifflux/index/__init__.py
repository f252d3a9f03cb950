"""Indexing: file scanning, change detection, chunking and embedding batches."""
