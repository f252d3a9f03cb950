"""Live freshness: a file watcher and job coalescing that keep the index current."""
