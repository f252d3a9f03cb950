import io

from rifflux.cli import job_progress
from rifflux.progress import PhaseProgress, ProgressLine
from rifflux.store.jobs import JobRecord


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_draws_done_total_rate_and_detail_on_a_terminal() -> None:
    stream = Terminal()
    line = ProgressLine(stream, "indexing", "files")
    line.update(3, 10, "120 chunks · running")
    line.close()
    text = stream.getvalue()
    assert text.startswith("\rindexing [#######") and "3/10 files" in text
    assert "120 chunks · running" in text and "ETA" in text and text.endswith("\n")


def test_is_silent_when_not_a_terminal() -> None:
    stream = io.StringIO()
    line = ProgressLine(stream, "indexing", "files")
    line.update(1, 2)
    line.close()
    assert stream.getvalue() == ""


def test_phase_progress_prints_one_line_per_phase_change_without_a_terminal() -> None:
    stream = io.StringIO()
    bars = PhaseProgress(stream)
    bars.update("scanning", {"scanning": (0, None, "")})
    bars.update("lexical", {"lexical": (0, 40, "0 chunks")})
    bars.update("lexical", {"lexical": (20, 40, "300 chunks")})
    bars.update("embedding", {"embedding": (50, 600, "3/40 files")})
    bars.update("done", {})
    bars.close()
    assert stream.getvalue().splitlines() == [
        "rifflux: scanning: 0/? files",
        "rifflux: chunking and writing (keyword-searchable): 0/40 files 0 chunks",
        "rifflux: embedding: 50/600 chunks 3/40 files",
        "rifflux: done",
    ]


def test_phase_progress_draws_a_bar_per_phase_with_counts_on_a_terminal() -> None:
    stream = Terminal()
    bars = PhaseProgress(stream)
    bars.update("lexical", {"scanning": (40, 40, ""), "lexical": (10, 40, "150 chunks")})
    bars.update(
        "embedding",
        {
            "scanning": (40, 40, ""),
            "lexical": (40, 40, "600 chunks"),
            "embedding": (5, 40, "80/600 chunks"),
        },
    )
    bars.close()
    text = stream.getvalue()
    for expected in (
        "scanning",
        "40/40",
        "chunk+write",
        "600 chunks",
        "embedding",
        "5/40",
        "80/600 chunks",
    ):
        assert expected in text, expected


def embedding(chunks_embedded: int) -> JobRecord:
    """A running job in its vector phase: one large file of 600 chunks, its rows written."""
    return JobRecord(
        id="j1",
        roots=["docs"],
        options={},
        state="running",
        planned=True,
        files_total=1,
        files_planned=1,
        files_written=1,
        chunks_written=600,
        batches_total=4,
        batches_written=4,
        chunks_to_embed=600,
        chunks_embedded=chunks_embedded,
    )


def test_the_embedding_eta_counts_chunks_not_files() -> None:
    # One file is 0/1 done until its last chunk is embedded: an ETA over files would
    # stay unknown (-:--:--); over chunks it is 30 s after 300 of 600 in 30 s.
    stream, now = Terminal(), [0.0]
    update, bars = job_progress(stream, clock=lambda: now[0])
    for seconds, chunks in ((0, 0), (10, 100), (20, 200), (30, 300)):
        now[0] = seconds
        update(embedding(chunks))
    bars.close()
    last = stream.getvalue().rsplit("embedding", 1)[1]
    assert "300/600" in last and "0/1 files" in last and "10.0/s" in last, last
    assert "0:00:30" in last and "-:--:--" not in last, last
