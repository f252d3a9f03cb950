"""Which dramatiq Workers a worker process runs: the embed queue apart from the index-host
queues when it consumes both and has lexical threads."""

from __future__ import annotations

from workers.child import split_queues

DECLARED = ["rifflux_embed", "rifflux_plan", "rifflux_write"]


def test_a_process_of_every_queue_gives_the_index_host_queues_their_own_threads() -> None:
    assert split_queues([], DECLARED, 1, 1) == [
        (("rifflux_embed",), 1),
        (("rifflux_plan", "rifflux_write"), 1),
    ]


def test_one_worker_when_there_is_nothing_to_split_or_no_lexical_threads() -> None:
    assert split_queues([], DECLARED, 2, 0) == [((), 2)]
    assert split_queues(["rifflux_embed"], DECLARED, 1, 1) == [(("rifflux_embed",), 1)]
    index_host = ["rifflux_plan", "rifflux_write"]
    assert split_queues(index_host, DECLARED, 1, 1) == [(tuple(index_host), 1)]
