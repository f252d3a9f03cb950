import io

from rifflux.progress import ProgressLine


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
