"""SQLite storage: schema, connections, ``transaction()`` with busy retry, and every query
on the index tables (``IndexReader``, ``IndexWriter``, job records)."""
