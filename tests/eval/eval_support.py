"""A tiny hand-made BEIR dataset whose lexical ranking can be worked out by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

# d1 and d2 share no query word; d3 says "zebra" three times in few words, d4 once in
# many, so BM25 ranks d3 above d4 for "zebra". d4's id needs encoding as a file name.
ODD_ID = "doc/4 ünï.x"
CORPUS = [
    {"_id": "d1", "title": "Apple orchards", "text": "Apples grow on trees in orchards."},
    {"_id": "d2", "title": "Banana farming", "text": "Bananas are farmed in the tropics."},
    {"_id": "d3", "title": "Stripes", "text": "A zebra, a zebra and one more zebra."},
    {
        "_id": ODD_ID,
        "title": "Savanna animals",
        "text": "Lions, giraffes, elephants, antelopes, a zebra and many birds live on "
        "the wide grasslands of the savanna, far from rivers and forests.",
    },
]
QUERIES = [
    {"_id": "q1", "text": "banana"},
    {"_id": "q2", "text": "zebra"},
    {"_id": "q3", "text": "apple"},  # judged, but nothing relevant: skipped
]
# q4 is judged but has no query text: skipped.
QRELS = "query-id\tcorpus-id\tscore\nq1\td2\t1\nq2\t{odd}\t2\nq2\td1\t1\nq3\td1\t0\nq4\td1\t1\n"

# q1: d2 first → nDCG 1, recall 1, MRR 1.
# q2: ranking d3, d4 (grade 2); d1 (grade 1) is never retrieved.
Q2_NDCG = (2 / math.log2(3)) / (2 / math.log2(2) + 1 / math.log2(3))
LEXICAL_NDCG = (1.0 + Q2_NDCG) / 2
LEXICAL_RECALL = (1.0 + 0.5) / 2
LEXICAL_MRR = (1.0 + 0.5) / 2


def write_beir_dataset(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps(row) + "\n" for row in CORPUS), encoding="utf-8"
    )
    (root / "queries.jsonl").write_text(
        "".join(json.dumps(row) + "\n" for row in QUERIES), encoding="utf-8"
    )
    (root / "qrels" / "test.tsv").write_text(QRELS.format(odd=ODD_ID), encoding="utf-8")
    return root
