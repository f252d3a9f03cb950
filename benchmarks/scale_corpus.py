"""A deterministic large markdown corpus for scale runs: generated, never committed.

``generate(dest, files, seed)`` writes ``files`` markdown files (1,000 per folder) whose
words are drawn, with their real frequencies, from the vocabulary of a real corpus
(awesome-copilot by default: ~40k distinct words of technical English). Each file has a
title, often a YAML front matter, and 3–8 sections (``##``, sometimes ``###``) of
paragraphs, bullet and numbered lists, fenced code blocks (Python, Bash, JSON) and now
and then a table. One file in 500 is large: 40–80 sections (~40–80 KB), as a long
guide or changelog is. With the default chunk bounds a file averages ~10 chunks, so
100,000 files make ~1M chunks (~0.9 GB of markdown).

The same ``(files, seed, vocabulary)`` always gives byte-identical files: every file is
generated from its own ``random.Random(seed, index)``, so a file's text does not depend on
how many files were generated before it and the corpus can be generated in parallel.

    .venv/bin/python -m benchmarks.scale_corpus /work/scale-corpus --files 100000
"""

from __future__ import annotations

import argparse
import itertools
import random
import re
import sys
import time
from collections import Counter
from pathlib import Path

from benchmarks.harness import DEFAULT_CORPUS, emit

FILES_PER_FOLDER = 1_000
WORD = re.compile(r"[A-Za-z][a-z]{1,15}")
LANGUAGES = ("python", "bash", "json")
# One file in LARGE_EVERY (those whose index is LARGE_EVERY // 2 past a multiple) has
# LARGE_SECTIONS sections instead of 3–8.
LARGE_EVERY = 500
LARGE_SECTIONS = (40, 80)


class Vocabulary:
    """Words with their corpus frequencies, sampled by cumulative weight."""

    def __init__(self, counts: Counter[str]) -> None:
        self.words = sorted(counts)
        self.cumulative = list(itertools.accumulate(counts[w] for w in self.words))

    @classmethod
    def from_corpus(cls, source: Path) -> Vocabulary:
        counts: Counter[str] = Counter()
        for path in sorted(source.rglob("*.md")):
            counts.update(w.lower() for w in WORD.findall(path.read_text(errors="replace")))
        if not counts:
            sys.exit(f"no words found under {source}")
        return cls(counts)

    def words_for(self, rng: random.Random, n: int) -> list[str]:
        return rng.choices(self.words, cum_weights=self.cumulative, k=n)


def sentence(vocab: Vocabulary, rng: random.Random) -> str:
    words = vocab.words_for(rng, rng.randint(7, 22))
    if rng.random() < 0.15:
        i = rng.randrange(len(words))
        words[i] = f"`{words[i]}`"
    text = " ".join(words)
    return text[0].upper() + text[1:] + rng.choice(".....?!")


def paragraph(vocab: Vocabulary, rng: random.Random) -> str:
    return " ".join(sentence(vocab, rng) for _ in range(rng.randint(2, 6)))


def bullet_list(vocab: Vocabulary, rng: random.Random) -> str:
    numbered = rng.random() < 0.35
    items = []
    for n in range(rng.randint(3, 8)):
        marker = f"{n + 1}." if numbered else "-"
        head = " ".join(vocab.words_for(rng, rng.randint(2, 4)))
        item = f"{marker} **{head}**: {sentence(vocab, rng)}" if rng.random() < 0.4 else ""
        items.append(item or f"{marker} {sentence(vocab, rng)}")
    return "\n".join(items)


def code_block(vocab: Vocabulary, rng: random.Random) -> str:
    language = rng.choice(LANGUAGES)
    names = vocab.words_for(rng, 12)
    if language == "python":
        lines = [f"def {names[0]}_{names[1]}({names[2]}, {names[3]}=None):"]
        lines += [f'    """{sentence(vocab, rng)}"""']
        for i in range(rng.randint(2, 8)):
            lines.append(f"    {names[4 + i % 8]} = {names[(5 + i) % 12]}.get('{names[i % 12]}')")
        lines.append(f"    return {names[4]}")
    elif language == "bash":
        lines = [f"# {sentence(vocab, rng)}"]
        for i in range(rng.randint(2, 6)):
            lines.append(f"{names[i]} --{names[i + 1]} {names[i + 2]}/{names[i + 3]}.md")
    else:
        pairs = [f'  "{names[i]}": "{names[i + 6]}"' for i in range(rng.randint(2, 6))]
        lines = ["{", ",\n".join(pairs), "}"]
    return f"```{language}\n" + "\n".join(lines) + "\n```"


def table(vocab: Vocabulary, rng: random.Random) -> str:
    columns = rng.randint(2, 4)
    header = vocab.words_for(rng, columns)
    rows = [
        "| " + " | ".join(" ".join(vocab.words_for(rng, rng.randint(1, 3))) for _ in header) + " |"
        for _ in range(rng.randint(2, 5))
    ]
    return "\n".join(
        ["| " + " | ".join(header) + " |", "|" + "---|" * columns, *rows],
    )


def document(vocab: Vocabulary, rng: random.Random, large: bool = False) -> str:
    title = " ".join(w.capitalize() for w in vocab.words_for(rng, rng.randint(2, 6)))
    parts = []
    if rng.random() < 0.4:
        parts.append(f"---\ndescription: '{sentence(vocab, rng)}'\napplyTo: '**/*.md'\n---")
    parts += [f"# {title}", paragraph(vocab, rng)]
    for _ in range(rng.randint(*LARGE_SECTIONS) if large else rng.randint(3, 8)):
        parts.append("## " + " ".join(w.capitalize() for w in vocab.words_for(rng, 3)))
        for _ in range(rng.randint(1, 4)):
            roll = rng.random()
            if roll < 0.45:
                parts.append(paragraph(vocab, rng))
            elif roll < 0.7:
                parts.append(bullet_list(vocab, rng))
            elif roll < 0.9:
                parts.append(code_block(vocab, rng))
            else:
                parts.append(table(vocab, rng))
        if rng.random() < 0.3:
            parts.append("### " + " ".join(vocab.words_for(rng, 2)).capitalize())
            parts.append(paragraph(vocab, rng))
    return "\n\n".join(parts) + "\n"


def file_path(dest: Path, index: int) -> Path:
    return dest / f"part-{index // FILES_PER_FOLDER:04d}" / f"doc-{index:06d}.md"


def generate(dest: Path, files: int, seed: int = 13, source: Path = DEFAULT_CORPUS) -> int:
    """Write ``files`` documents under ``dest``; returns the bytes written."""
    vocab = Vocabulary.from_corpus(source)
    written = 0
    for index in range(files):
        path = file_path(dest, index)
        if index % FILES_PER_FOLDER == 0:
            path.parent.mkdir(parents=True, exist_ok=True)
        large = index % LARGE_EVERY == LARGE_EVERY // 2
        text = document(vocab, random.Random(f"{seed}:{index}"), large)
        path.write_text(text, encoding="utf-8")
        written += len(text.encode("utf-8"))
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--source", type=Path, default=DEFAULT_CORPUS)
    args = parser.parse_args()
    started = time.perf_counter()
    size = generate(args.dest, args.files, args.seed, args.source)
    emit(
        "scale_corpus",
        files=args.files,
        mb=round(size / 1e6, 1),
        seconds=round(time.perf_counter() - started, 1),
        dest=str(args.dest),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
