"""Job queueing: the SQLite Dramatiq broker and broker selection by URL."""
