import argparse
import json
from pathlib import Path

import pytest
import structlog
from eval_support import LEXICAL_NDCG

from rifflux.errors import InvalidQueryError
from rifflux.eval.cli import add_eval_parser, parse_modes


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rifflux")
    add_eval_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    # Log lines stay out of stdout, as with `rifflux.cli.main` (which logs to stderr).
    with structlog.testing.capture_logs():
        return args.handler(args)


@pytest.fixture(autouse=True)
def _hash_backend(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RIFFLUX_EMBEDDING_BACKEND", "hash")
    monkeypatch.setenv("RIFFLUX_EVAL_CACHE_DIR", str(tmp_path / "eval-cache"))


def test_json_output_has_one_object_with_metrics_per_mode(
    beir_dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(["eval", str(beir_dataset), "--qrels", "test", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["dataset"] == "tiny-beir"
    assert out["queries"] == 2
    assert list(out["modes"]) == ["lexical", "semantic", "hybrid"]
    for metrics in out["modes"].values():
        assert set(metrics) == {"ndcg@10", "recall@100", "mrr@10", "precision@10", "p50_ms"}
        assert all(0.0 <= metrics[key] <= 1.0 for key in ("ndcg@10", "recall@100", "mrr@10"))
    assert out["modes"]["lexical"]["ndcg@10"] == round(LEXICAL_NDCG, 4)
    assert Path(out["cache_dir"]).parent == tmp_path / "eval-cache"
    assert out["index"]["vectors_new"] == 4
    assert out["options"] == {}


def test_search_options_reach_every_search_and_the_report(
    beir_dataset: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["eval", str(beir_dataset), "--qrels", "test", "--modes", "hybrid", "--json"]
    assert run_cli([*argv, "--fusion", "minmax", "--alpha", "0.6", "--group-by", "file"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["options"] == {"fusion": "minmax", "alpha": 0.6, "group_by": "file"}
    assert set(out["modes"]["hybrid"]) >= {"ndcg@10", "precision@10"}
    # No semantic candidate reaches cosine 1 and alpha 0 ranks like the keyword side:
    # the lexical mode's hand-computed nDCG.
    assert run_cli([*argv, "--fusion", "minmax", "--alpha", "0", "--min-cosine", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["modes"]["hybrid"]["ndcg@10"] == round(
        LEXICAL_NDCG, 4
    )
    with pytest.raises(InvalidQueryError, match="alpha must be a number from 0 to 1"):
        run_cli([*argv, "--alpha", "2"])


def test_modes_and_top_k_options_shape_the_report(
    beir_dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "explicit"
    argv = ["eval", str(beir_dataset), "--modes", "semantic", "--top-k", "3"]
    assert run_cli([*argv, "--cache-dir", str(cache), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out["modes"]) == ["semantic"]
    assert "recall@3" in out["modes"]["semantic"]
    assert Path(out["cache_dir"]).parent == cache
    assert run_cli([*argv, "--cache-dir", str(cache)]) == 0
    text = capsys.readouterr().out
    assert "tiny-beir: 2 queries" in text
    assert "0 indexed, 4 unchanged, 0 embedded" in text
    assert text.splitlines()[-1].startswith("semantic")


def test_unknown_mode_is_rejected_with_the_valid_choices() -> None:
    with pytest.raises(InvalidQueryError, match="mode must be one of lexical, semantic, hybrid"):
        parse_modes("lexical,fuzzy")
    assert parse_modes("hybrid, lexical,hybrid") == ["hybrid", "lexical"]
