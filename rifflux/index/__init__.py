"""Indexing: file scanning, change detection, chunking, embedding batches, and the
pipeline (plan / embed / write / finalize) with its typed queue messages."""
