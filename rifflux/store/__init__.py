"""SQLite storage: schema, connections, busy retry, and the queries on them."""
