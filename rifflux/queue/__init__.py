"""Job transport: Dramatiq brokers (SQLite, Redis, RabbitMQ), queue names, the front-end
client, worker presence and stall detection. The job steps themselves live in
``rifflux.index.pipeline`` and the job records in ``rifflux.store.jobs``."""
