"""Fixtures for the ``rifflux eval`` tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from eval_support import write_beir_dataset


@pytest.fixture
def beir_dataset(tmp_path: Path) -> Path:
    return write_beir_dataset(tmp_path / "tiny-beir")
