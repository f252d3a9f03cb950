import re
from pathlib import Path

import pytest
from eval_support import ODD_ID
from hypothesis import given
from hypothesis import strategies as st

from rifflux.errors import RiffluxError
from rifflux.eval import beir


def test_doc_file_names_encode_unsafe_characters() -> None:
    assert beir.doc_file_name("12345") == "12345.md"
    assert beir.doc_file_name(ODD_ID) == "doc%2F4%20%C3%BCn%C3%AF%2Ex.md"
    assert beir.doc_file_name("..") == "%2E%2E.md"


@given(st.text(min_size=1, max_size=300), st.text(min_size=1, max_size=300))
def test_doc_file_names_are_safe_and_distinct(a: str, b: str) -> None:
    name_a, name_b = beir.doc_file_name(a), beir.doc_file_name(b)
    assert re.fullmatch(r"[A-Za-z0-9_%~-]+\.md", name_a)
    assert len(name_a.encode()) <= beir.MAX_NAME_BYTES + 3
    assert (name_a == name_b) == (a == b)


def test_documents_are_markdown_with_the_title_as_heading() -> None:
    doc = beir.Document("1", "A  title\nsplit", "Body text. ")
    assert beir.doc_markdown(doc) == "# A title split\n\nBody text.\n"
    assert beir.doc_markdown(beir.Document("2", "", "Only text")) == "Only text\n"


def test_materialise_maps_stored_paths_to_document_ids(beir_dataset: Path, tmp_path: Path) -> None:
    paths = beir.materialise(beir_dataset, tmp_path / "cache")
    assert paths["docs/d1.md"] == "d1"
    assert paths[beir.doc_rel_path(ODD_ID)] == ODD_ID
    text = (tmp_path / "cache" / "docs" / "d3.md").read_text(encoding="utf-8")
    assert text.startswith("# Stripes\n\nA zebra")


def test_qrels_skip_the_header_and_read_trec_format(tmp_path: Path) -> None:
    beir_tsv = tmp_path / "beir.tsv"
    beir_tsv.write_text("query-id\tcorpus-id\tscore\n1\ta\t1\n1\tb\t2\n2\tc\t0\n")
    assert beir.load_qrels(beir_tsv) == {"1": {"a": 1, "b": 2}, "2": {"c": 0}}
    trec = tmp_path / "trec.txt"
    trec.write_text("1 0 a 1\n1 0 b 2\n")
    assert beir.load_qrels(trec) == {"1": {"a": 1, "b": 2}}


def test_qrels_resolve_by_split_name_or_the_only_file(beir_dataset: Path) -> None:
    expected = beir_dataset / "qrels" / "test.tsv"
    assert beir.resolve_qrels(beir_dataset, "test") == expected
    assert beir.resolve_qrels(beir_dataset, None) == expected
    with pytest.raises(RiffluxError, match="not found"):
        beir.resolve_qrels(beir_dataset, "dev")
