"""The vector cache the front process searches instead of reading SQLite per query."""
