"""Damage a published vector cache in place, as the three failures of issue 16 did.

Each function writes into the existing files (same inode, same length), the way a bad
disk, a stray ``dd`` or a buggy tool would, and returns the name of the file it damaged.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rifflux.vectors.segments import read_manifest, segment_files, vectors_dir


def base_segment_files(db_path: Path) -> tuple[Path, Path]:
    """(vectors file, meta file) of the manifest's first segment."""
    directory = vectors_dir(db_path)
    found = read_manifest(directory)
    assert found is not None, "precondition: a published cache"
    vec_name, meta_name, _ = segment_files(found[0].segments[0].id)
    return directory / vec_name, directory / meta_name


def shift_row_ids(db_path: Path) -> str:
    """Rotate the id map by one row: every vector now answers for its neighbour's chunk."""
    _, meta_path = base_segment_files(db_path)
    meta = np.load(meta_path, mmap_mode="r+")
    meta[:] = np.roll(np.array(meta), 1, axis=0)
    meta.flush()
    del meta
    return meta_path.name


def zero_rows(db_path: Path) -> str:
    """Overwrite every vector with zeros."""
    vec_path, _ = base_segment_files(db_path)
    vectors = np.load(vec_path, mmap_mode="r+")
    vectors[:] = 0.0
    vectors.flush()
    del vectors
    return vec_path.name


def random_bytes(db_path: Path, seed: int = 16) -> str:
    """Overwrite the vectors' data (not the .npy header) with random bytes."""
    vec_path, _ = base_segment_files(db_path)
    vectors = np.load(vec_path, mmap_mode="r+")
    raw = vectors.view(np.uint8).reshape(-1)
    raw[:] = np.random.default_rng(seed).integers(0, 256, raw.shape[0], dtype=np.uint8)
    vectors.flush()
    del vectors, raw
    return vec_path.name


DAMAGES = {"shifted-ids": shift_row_ids, "zeroed-rows": zero_rows, "random-bytes": random_bytes}
