"""The one progress helper: a rich bar on a terminal, one plain line per step elsewhere."""

from __future__ import annotations

import io

import pytest

from deepedge.cli.progress import Progress


def test_off_a_terminal_every_new_note_is_one_line_with_the_count() -> None:
    stream = io.StringIO()
    bar = Progress("update", total=3, unit="epochs", stream=stream)
    bar.start()
    bar.update(note="starting Ray")
    bar.update(note="starting Ray")  # the same note again: nothing new to say
    bar.update(done=1, note="epoch 1: accuracy 0.500")
    bar.update(done=2)  # no note: the count alone moves silently
    bar.say("a worker failed")
    bar.stop()
    lines = stream.getvalue().splitlines()
    assert [line.rsplit(" (", 1)[0] for line in lines] == [
        "update: [0/3 epochs] starting Ray",
        "update: [1/3 epochs] epoch 1: accuracy 0.500",
        "update: [2/3 epochs] a worker failed",
    ]
    assert all(line.endswith("ms)") or line.endswith("s)") for line in lines)


def test_without_a_total_the_lines_have_no_count() -> None:
    stream = io.StringIO()
    bar = Progress("fit", total=None, unit="functions", stream=stream)
    bar.update(note="EstComputeTime")
    assert stream.getvalue().startswith("fit: EstComputeTime (")


def test_a_total_learned_later_is_shown() -> None:
    stream = io.StringIO()
    bar = Progress("fit", total=None, unit="functions", stream=stream)
    bar.update(done=0, total=5, note="EstComputeTime")
    assert stream.getvalue().startswith("fit: [0/5 functions] EstComputeTime")


def test_on_a_terminal_it_is_a_rich_bar() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Tty()
    bar = Progress("update", total=2, unit="epochs", stream=stream)
    bar.start()
    bar.update(done=1, note="epoch 1: accuracy 0.500")
    bar.stop()
    shown = stream.getvalue()
    assert "\x1b[" in shown and "1/2" in shown and "epoch 1: accuracy 0.500" in shown


def test_the_callers_time_left_is_shown_once_known() -> None:
    stream = io.StringIO()
    bar = Progress("profile", total=20, unit="points", stream=stream)
    bar.update(done=1, note="cpu=0 b=16")
    bar.update(done=2, note="cpu=0.5 b=16", left_s=185.0)
    first, second = stream.getvalue().splitlines()
    assert "ETA" not in first
    assert second.startswith("profile: [2/20 points] cpu=0.5 b=16 (")
    assert second.endswith(", ETA 3m05s)")


def test_on_a_terminal_the_commands_own_stdout_lines_stay_on_stdout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """stderr a terminal, stdout a file (``deepedge demo > story.txt``): rich would have
    moved the story printed under the bar onto the terminal."""

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Tty()
    bar = Progress("demo", total=2, unit="windows", stream=stream)
    bar.start()
    print("window 0: the story")
    bar.update(done=1, note="window 0: v1 0.950")
    bar.stop()
    assert capsys.readouterr().out == "window 0: the story\n"
    assert "the story" not in stream.getvalue() and "window 0: v1 0.950" in stream.getvalue()
