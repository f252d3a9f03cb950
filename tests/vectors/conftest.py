"""Fixtures shared by the vector cache tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def no_publish_on_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """Index without the Indexer's publish hook: writes that bypass the cache, or tests
    that publish themselves to see the result."""
    monkeypatch.setattr("rifflux.index.indexer.publish_quietly", lambda *a, **k: None)
