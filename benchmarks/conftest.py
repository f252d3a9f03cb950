"""Fixtures for the checks of the benchmarks' own code (``benchmarks/test_*.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# Four documents and two answerable queries: d3 says "zebra" three times in few words,
# the savanna document once in many (and is the only other one saying "the"); its id
# needs encoding as a file name.
CORPUS = [
    {"_id": "d1", "title": "Apple orchards", "text": "Apples grow on trees in orchards."},
    {"_id": "d2", "title": "Banana farming", "text": "Bananas are farmed in the tropics."},
    {"_id": "d3", "title": "Stripes", "text": "A zebra, a zebra and one more zebra."},
    {
        "_id": "doc/4 ünï.x",
        "title": "Savanna animals",
        "text": "Lions, giraffes, elephants, antelopes, a zebra and many birds live on "
        "the wide grasslands of the savanna, far from rivers and forests.",
    },
]
QUERIES = [{"_id": "q1", "text": "banana"}, {"_id": "q2", "text": "zebra"}]
QRELS = "query-id\tcorpus-id\tscore\nq1\td2\t1\nq2\tdoc/4 ünï.x\t2\nq2\td1\t1\n"


@pytest.fixture
def beir_dataset(tmp_path: Path) -> Path:
    root = tmp_path / "tiny-beir"
    (root / "qrels").mkdir(parents=True)
    for name, rows in (("corpus.jsonl", CORPUS), ("queries.jsonl", QUERIES)):
        text = "".join(json.dumps(row) + "\n" for row in rows)
        (root / name).write_text(text, encoding="utf-8")
    (root / "qrels" / "test.tsv").write_text(QRELS, encoding="utf-8")
    return root
