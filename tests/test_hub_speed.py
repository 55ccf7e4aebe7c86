"""What keeps a many-shard Hub read cheap: kept-alive connections, one range request per shard, no helper thread
per request. Counts only (requests, connections, threads), never wall-clock times: bench/bench_hub.py times it."""

from __future__ import annotations

from qcheck.readers import load_checkpoint
from support.hubserver import sharded_repo


def test_shard_reads_reuse_kept_alive_connections(hub, monkeypatch):
    # two workers read 12 shard headers one after another: each exact-length range answer is read to its end,
    # so the connection goes back to the pool instead of being closed and opened again for the next shard
    monkeypatch.setenv("QCHECK_HUB_WORKERS", "2")
    hub.add_repo("org/twelve", sharded_repo(12))
    ck = load_checkpoint("org/twelve")
    assert len(ck.tensors) == 12 * 18
    assert len(hub.requests(r"\.safetensors$")) == 12
    assert len(hub.requests()) == 15  # repo info, config.json, the index, 12 shard headers
    assert hub.connections <= 4, hub.connections  # the main thread's and the two workers' (one spare)
