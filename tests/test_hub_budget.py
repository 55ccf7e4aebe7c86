"""One deadline and byte budget for every network exchange of a run (issue #17, item 6), against the fake Hub.

A server that drips one byte at a time never trips a per-read timeout; a rate limit asking for a long wait
must not be waited out by every concurrent request; nothing is fetched on qcheck's behalf beyond what it reads.
"""

from __future__ import annotations

import pytest

from qcheck.budget import Budget, end_run, start_run
from qcheck.errors import RemoteError
from qcheck.hub import NetworkError, RateLimitedError
from qcheck.readers import load_checkpoint
from support.hubserver import sharded_repo


@pytest.mark.parametrize("action, path", [("drip", r"^/api/models/org/drip"), ("drip-body", r"^/api/models/org/drip"),
                                          ("drip-body", r"\.safetensors$")])
def test_a_dripping_server_ends_at_the_run_deadline(action: str, path: str, hub, monkeypatch) -> None:
    hub.add_repo("org/drip", sharded_repo(1))
    hub.inject(path, action, times=100)
    monkeypatch.setenv("QCHECK_HUB_DEADLINE", "1.5")
    monkeypatch.setenv("QCHECK_HUB_TIMEOUT", "5")  # a per-read timeout alone would never fire on the drip
    with pytest.raises(NetworkError, match=r"the run's 1.5 s network deadline passed .* QCHECK_HUB_DEADLINE"):
        load_checkpoint("org/drip")


def test_the_cli_ends_a_dripping_run_with_one_line(hub, monkeypatch, capsys) -> None:
    from qcheck.cli import main

    hub.add_repo("org/drip", sharded_repo(1))
    hub.inject(r"\.safetensors$", "drip", times=100)
    monkeypatch.setenv("QCHECK_HUB_DEADLINE", "1")
    with pytest.raises(SystemExit) as info:
        main(["inspect", "org/drip"])
    out, err = capsys.readouterr()
    assert info.value.code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("qcheck: error: ") and "network deadline passed" in err


def test_a_rate_limit_longer_than_the_wait_stops_every_request_at_once(hub) -> None:
    """429 Retry-After 30: no 30 s waits, one request per file at most, and the count said is the count made."""
    hub.add_repo("org/busy", sharded_repo(3))
    hub.inject(r"\.safetensors$", 429, times=100, headers={"Retry-After": "30"})
    start_run()
    try:
        with pytest.raises(RateLimitedError, match=r"after 1 attempts; the server asks to retry after 30 s"):
            load_checkpoint("org/busy")
    finally:
        end_run()
    assert 1 <= len(hub.requests(r"\.safetensors$")) <= 3


def test_the_run_byte_budget_bounds_every_body(hub, monkeypatch) -> None:
    hub.add_repo("org/big", sharded_repo(2))
    monkeypatch.setenv("QCHECK_HUB_MAX_BYTES", "2000")
    with pytest.raises(RemoteError, match=r"sent more than 2000 bytes in this run .* QCHECK_HUB_MAX_BYTES"):
        load_checkpoint("org/big")


def test_only_the_checkpoints_files_are_requested(hub) -> None:
    """qcheck builds its own headers: nothing asks the Hub for anything else (huggingface_hub's
    ``build_hf_headers`` would fetch the agent-harness registry, an unbounded body outside the budget)."""
    hub.add_repo("org/m", sharded_repo(1))
    assert len(load_checkpoint("org/m").tensors) == 18
    assert sorted(r.path for r in hub.requests()) == sorted([
        "/api/models/org/m", *(f"/org/m/resolve/{hub.repos['org/m'].refs['main']}/{name}"
                               for name in ("config.json", "model.safetensors.index.json",
                                            "model-00001-of-00001.safetensors"))])


def test_budget_settings_are_validated(monkeypatch) -> None:
    from qcheck.errors import UsageError

    monkeypatch.setenv("QCHECK_HUB_DEADLINE", "nan")
    with pytest.raises(UsageError, match="QCHECK_HUB_DEADLINE must be a finite number"):
        Budget()


@pytest.mark.parametrize("timeout", ["10", "1e12"])
def test_a_huge_deadline_means_no_deadline_not_an_overflow(hub, monkeypatch, timeout) -> None:
    """1e12 s is finite and accepted; every wait and socket timeout derived from it must stay within what
    threading and socket accept (it raised OverflowError on the multi-shard prefetch)."""
    monkeypatch.setenv("QCHECK_HUB_DEADLINE", "1e12")
    monkeypatch.setenv("QCHECK_HUB_TIMEOUT", timeout)
    hub.add_repo("org/many", sharded_repo(4))
    assert len(load_checkpoint("org/many").tensors) == 4 * 18
