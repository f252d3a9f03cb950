"""Queue messages survive their JSON encoding exactly, and another version is refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rifflux.errors import MessageVersionError
from rifflux.index.changes import FileWork
from rifflux.index.messages import (
    MESSAGE_VERSION,
    BatchFailure,
    EmbedRequest,
    JobStep,
    WriteRequest,
    decode_batch_step,
    finalize_request,
    plan_request,
)
from rifflux.store.rows import PreparedBatch, PreparedChunk, PreparedFile


def over_the_wire(data: dict) -> dict:
    """What a broker hands a worker: the message body as JSON text, parsed again."""
    return json.loads(json.dumps(data))


def embed_request() -> EmbedRequest:
    return EmbedRequest(
        db_path="/idx/index.db",
        job_id="j1",
        batch_no=3,
        files=(
            FileWork("docs/a.md", 1_700_000_000_123_456_789, 12, "ab" * 32, "# A\n\nü text"),
            FileWork("docs/b.md", 5, 0, "cd" * 32, ""),
        ),
        known=("h1", "h2"),
        model="hash:384",
        max_chunk_chars=1200,
        min_chunk_chars=200,
        vanished=("docs/gone.md",),
    )


def write_request() -> WriteRequest:
    vectors = {
        "h3": np.array([0.1, -0.0, np.float32(1e-38), 3.4e38], dtype=np.float32),
        "h4": np.arange(4, dtype=np.float32) / 3,
    }
    batch = PreparedBatch(
        [
            PreparedFile(
                "docs/a.md",
                7,
                12,
                "ab" * 32,
                [PreparedChunk("c0", 0, "A", "# A", "h3"), PreparedChunk("c1", 1, "A", "x", "h1")],
            )
        ],
        "hash:384",
        4,
        vectors,
    )
    return WriteRequest("/idx/index.db", "j1", 3, batch, ("docs/gone.md",), retries=2)


def test_job_steps_round_trip_through_json() -> None:
    for step in (plan_request("/idx/index.db", "j1"), finalize_request("/idx/index.db", "j1")):
        assert JobStep.from_dict(over_the_wire(step.to_dict()), step.kind) == step


def test_an_embed_request_round_trips_through_json() -> None:
    request = embed_request()
    assert EmbedRequest.from_dict(over_the_wire(request.to_dict())) == request


def test_a_write_request_keeps_every_vector_bit_for_bit() -> None:
    request = write_request()
    data = over_the_wire(request.to_dict())
    decoded = WriteRequest.from_dict(data)
    assert decoded.batch.files == request.batch.files
    assert (decoded.db_path, decoded.job_id, decoded.batch_no) == ("/idx/index.db", "j1", 3)
    assert (decoded.vanished, decoded.retries) == (("docs/gone.md",), 2)
    assert decoded.batch.vectors.keys() == request.batch.vectors.keys()
    for key, vec in request.batch.vectors.items():
        assert decoded.batch.vectors[key].dtype == np.float32
        assert decoded.batch.vectors[key].tobytes() == vec.tobytes()
    # Compact: base64 of raw float32, not a list of decimal numbers.
    assert isinstance(data["batch"]["vectors"]["h3"], str)


def test_a_batch_failure_round_trips_through_json() -> None:
    failure = BatchFailure("/idx/index.db", "j1", 3, ("docs/a.md",), "RuntimeError: boom")
    assert BatchFailure.from_dict(over_the_wire(failure.to_dict())) == failure


def test_the_retry_callback_decodes_either_batch_step() -> None:
    embed, write = embed_request(), write_request()
    assert decode_batch_step(over_the_wire(embed.to_dict())) == embed
    decoded = decode_batch_step(over_the_wire(write.to_dict()))
    assert isinstance(decoded, WriteRequest) and decoded.paths == ["docs/a.md"]


@pytest.mark.parametrize("version", [MESSAGE_VERSION + 1, 0, None, "1"])
def test_a_message_of_another_version_is_refused(version: object) -> None:
    data = embed_request().to_dict()
    if version is None:
        del data["version"]
    else:
        data["version"] = version
    with pytest.raises(MessageVersionError, match="this Rifflux reads version"):
        EmbedRequest.from_dict(data)


def test_a_message_of_another_kind_is_refused() -> None:
    with pytest.raises(MessageVersionError, match="expected a 'write' message, got 'embed'"):
        WriteRequest.from_dict(embed_request().to_dict())
    with pytest.raises(MessageVersionError, match="expected a 'finalize' message"):
        JobStep.from_dict(plan_request("/idx/index.db", "j1").to_dict(), "finalize")
    # The positional arguments of the previous Rifflux are refused too, not misread.
    with pytest.raises(MessageVersionError):
        JobStep.from_dict(["/idx/index.db", "j1"], "plan")  # type: ignore[arg-type]
