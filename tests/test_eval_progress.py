"""Progress of a long eval when stderr is not a terminal: periodic lines with counts and an ETA, not silence."""

from __future__ import annotations

import io

from qcheck.eval.progress import LineProgress, duration


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_lines_at_start_every_interval_and_end():
    out, clock = io.StringIO(), Clock()
    p = LineProgress(out, interval=30, clock=clock)
    p.start("candidate q4", 100)
    for _ in range(100):
        clock.now += 1.0  # one item per second
        p.advance()
    p.stop()
    lines = out.getvalue().splitlines()
    assert lines[0] == "qcheck eval: candidate q4: 0/100 started"
    assert lines[1] == "qcheck eval: candidate q4: 30/100 (30%), 30 s elapsed, about 1 min 10 s left"
    assert lines[2] == "qcheck eval: candidate q4: 60/100 (60%), 1 min 00 s elapsed, about 40 s left"
    assert lines[-1] == "qcheck eval: candidate q4: 100/100 done in 1 min 40 s"
    assert len(lines) == 5  # 0, 30, 60, 90, done: bounded, not one per item


def test_durations():
    assert [duration(x) for x in (0.4, 59, 61, 3600 + 125)] == ["0 s", "59 s", "1 min 01 s", "1 h 02 min"]


def test_the_eval_runner_uses_lines_off_a_terminal(monkeypatch):
    from qcheck.eval.run import _Progress

    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.setenv("QCHECK_PROGRESS_INTERVAL", "0")
    p = _Progress(True)
    p.start("reference", 2)
    p.advance()
    p.advance()
    p.stop()
    assert err.getvalue().splitlines()[0] == "qcheck eval: reference: 0/2 started"
    assert err.getvalue().splitlines()[-1].startswith("qcheck eval: reference: 2/2 done in ")
    assert _Progress(False)._lines is None  # --no-progress stays silent
