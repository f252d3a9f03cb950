"""Queue messages survive their JSON encoding exactly, and another version is refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rifflux.errors import MessageVersionError
from rifflux.index.messages import (
    MESSAGE_VERSION,
    BatchFailure,
    ChunkRequest,
    EmbedRequest,
    JobStep,
    PlannedFile,
    VectorsRequest,
    decode_batch_step,
    finalize_request,
    plan_request,
)


def over_the_wire(data: dict) -> dict:
    """What a broker hands a worker: the message body as JSON text, parsed again."""
    return json.loads(json.dumps(data))


def chunk_request() -> ChunkRequest:
    return ChunkRequest(
        db_path="/idx/index.db",
        job_id="j1",
        batch_no=3,
        files=(
            PlannedFile("docs/ü.md", 1_700_000_000_123_456_789, 12, "ab" * 32),
            PlannedFile("docs/b.md", 5, 0, ""),
        ),
        model="hash:384",
        retries=1,
    )


def embed_request() -> EmbedRequest:
    return EmbedRequest(
        db_path="/idx/index.db",
        job_id="j1",
        batch_no=3,
        model="hash:384",
        paths=("docs/a.md", "docs/b.md"),
        texts=(("h1", "A\n\nü text"), ("h2", "# B")),
        unit=2,
        units=3,
    )


def vectors_request() -> VectorsRequest:
    vectors = {
        "h3": np.array([0.1, -0.0, np.float32(1e-38), 3.4e38], dtype=np.float32),
        "h4": np.arange(4, dtype=np.float32) / 3,
    }
    return VectorsRequest("/idx/index.db", "j1", 3, "hash:4", 4, ("docs/a.md",), vectors, 2)


def test_job_steps_round_trip_through_json() -> None:
    for step in (plan_request("/idx/index.db", "j1"), finalize_request("/idx/index.db", "j1")):
        assert JobStep.from_dict(over_the_wire(step.to_dict()), step.kind) == step


def test_chunk_and_embed_requests_round_trip_through_json() -> None:
    for request in (chunk_request(), embed_request()):
        assert type(request).from_dict(over_the_wire(request.to_dict())) == request


def test_a_vectors_request_keeps_every_vector_bit_for_bit() -> None:
    request = vectors_request()
    data = over_the_wire(request.to_dict())
    decoded = VectorsRequest.from_dict(data)
    assert (decoded.db_path, decoded.job_id, decoded.batch_no) == ("/idx/index.db", "j1", 3)
    assert (decoded.model, decoded.dim, decoded.paths, decoded.retries) == (
        "hash:4",
        4,
        ("docs/a.md",),
        2,
    )
    assert decoded.vectors.keys() == request.vectors.keys()
    for key, vec in request.vectors.items():
        assert decoded.vectors[key].dtype == np.float32
        assert decoded.vectors[key].tobytes() == vec.tobytes()
    # Compact: base64 of raw float32, not a list of decimal numbers.
    assert isinstance(data["vectors"]["h3"], str)


def test_a_batch_failure_round_trips_through_json() -> None:
    failure = BatchFailure("/idx/index.db", "j1", 3, ("docs/a.md",), "RuntimeError: boom")
    assert BatchFailure.from_dict(over_the_wire(failure.to_dict())) == failure


def test_the_retry_callback_decodes_every_batch_step() -> None:
    for request in (chunk_request(), embed_request()):
        assert decode_batch_step(over_the_wire(request.to_dict())) == request
    decoded = decode_batch_step(over_the_wire(vectors_request().to_dict()))
    assert isinstance(decoded, VectorsRequest) and decoded.paths == ("docs/a.md",)


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
    with pytest.raises(MessageVersionError, match="expected a 'vectors' message, got 'embed'"):
        VectorsRequest.from_dict(embed_request().to_dict())
    with pytest.raises(MessageVersionError, match="expected a 'finalize' message"):
        JobStep.from_dict(plan_request("/idx/index.db", "j1").to_dict(), "finalize")
    # The positional arguments of the previous Rifflux are refused too, not misread.
    with pytest.raises(MessageVersionError):
        JobStep.from_dict(["/idx/index.db", "j1"], "plan")  # type: ignore[arg-type]
