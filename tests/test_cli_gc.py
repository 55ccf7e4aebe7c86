"""The garbage collector is off while a short command (check, inspect, matrix) runs, on for every other command,
and ``main()`` called in-process leaves it as it found it."""

from __future__ import annotations

import gc
from pathlib import Path

import click
import pytest

import qcheck.pipeline
from qcheck.cli import COMMANDS, SHORT_COMMANDS, cli, main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def collector():
    was = gc.isenabled()
    yield
    gc.enable() if was else gc.disable()


def test_a_check_runs_without_the_collector_and_main_restores_it(monkeypatch: pytest.MonkeyPatch,
                                                                 collector: None) -> None:
    seen: list[bool] = []
    answer = qcheck.pipeline.answer

    def recording(*args, **kwargs):
        seen.append(gc.isenabled())
        return answer(*args, **kwargs)

    monkeypatch.setattr(qcheck.pipeline, "answer", recording)
    gc.enable()
    with pytest.raises(SystemExit) as done:
        main(["check", str(ROOT / "examples" / "tiny-llama-nvfp4"), "--engine", "vllm", "--gpu", "h100"])
    assert done.value.code == 0 and seen == [False]
    assert gc.isenabled()
    gc.disable()
    with pytest.raises(SystemExit):
        main(["check", str(ROOT / "examples" / "tiny-llama-nvfp4"), "--engine", "vllm", "--gpu", "h100"])
    assert not gc.isenabled()


@pytest.mark.parametrize("name", sorted(set(COMMANDS) - SHORT_COMMANDS))
def test_every_other_command_turns_the_collector_back_on(name: str, collector: None) -> None:
    gc.disable()
    with click.Context(cli) as ctx:
        assert cli.get_command(ctx, name) is not None
    assert gc.isenabled()


@pytest.mark.parametrize("name", sorted(SHORT_COMMANDS))
def test_short_commands_leave_it_off(name: str, collector: None) -> None:
    gc.disable()
    with click.Context(cli) as ctx:
        cli.get_command(ctx, name)
    assert not gc.isenabled()
