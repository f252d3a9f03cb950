"""Search: FTS5 BM25, cosine over the vector cache, and Reciprocal Rank Fusion."""
