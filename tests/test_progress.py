import io

from rifflux.progress import PhaseProgress, ProgressLine


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
    bars.update("embedding", {"embedding": (3, 40, "50/600 chunks")})
    bars.update("done", {})
    bars.close()
    assert stream.getvalue().splitlines() == [
        "rifflux: scanning: 0/? files",
        "rifflux: chunking and writing (keyword-searchable): 0/40 files 0 chunks",
        "rifflux: embedding: 3/40 files 50/600 chunks",
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
