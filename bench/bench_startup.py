"""Whole-process time of ``qcheck check`` and ``qcheck inspect`` on big GGUF headers, as ratios to the import of
the CLI's own toolkit (``python -c "import click, rich.console"``) measured in the same run.

    python bench/bench_startup.py [--rounds 7] [--workdir DIR] [--vocab-dir DIR] [--cold] [--tree LABEL=DIR]

Builds (once per ``--workdir``) two sparse GGUF files whose tensor data costs no disk (tests/support/model_headers.py):
Llama-3.1-8B-Instruct Q4_K_M (292 tensors, 128,256 tokens, 280,147 merges: a ~10 MB header in a 4.9 GB file) and
Gemma-3-12B-it Q4_K_M (626 tensors, 262,144 tokens with scores, no merges). ``--vocab-dir`` takes llama.cpp's
``models/`` folder (in the llama-cpp-python sdist) to copy the real token strings of ``ggml-vocab-llama-bpe.gguf``
and ``ggml-vocab-gemma-4.gguf`` instead of synthetic ones.

Every command runs once to warm up (bytecode compiled, caches written), then ``--rounds`` rounds each run every
command once as a fresh process, in a shuffled order, so load from other jobs on a shared machine hits all of them
alike. Printed per command, for wall time and for the CPU time of the process (user + system, less disturbed
by other jobs than wall time): the median over rounds (min-max), the ratio of medians to the baseline and the
per-round ratios (command / baseline of the same round), and the load average before and after. ``--cold``
adds every command with qcheck's data cache turned off (``QCHECK_CACHE=off``: no parsed matrix file, gguf-py table
or GGUF header is reused): the first run over a file, or a CI job without a kept cache. ``--tree before=DIR`` times another source tree of qcheck in the same
rounds (``git archive REV | tar -x -C DIR``), for before/after figures from one run. Targets (issue 22):
check <= 2.5x, inspect <= 2x. No timed assertions anywhere: the targets are read from this output.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support.model_headers import MODELS, write_header  # noqa: E402

VOCABS = {"llama31-8b-q4_k_m": "ggml-vocab-llama-bpe.gguf", "gemma3-12b-q4_k_m": "ggml-vocab-gemma-4.gguf"}
BASELINE = "python -c 'import click, rich.console'"


def qcheck_command() -> list[str]:
    """The console script next to this interpreter (what a user runs), else ``python -m qcheck``."""
    script = Path(sys.executable).with_name("qcheck")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "qcheck"]


def build(work: Path, vocab_dir: Path | None) -> dict[str, Path]:
    out = {}
    for key, make in MODELS.items():
        model = make()
        path = work / f"{model.label}.gguf"
        if not path.is_file():
            t0 = time.perf_counter()
            vocab = vocab_dir / VOCABS[key] if vocab_dir is not None else None
            header, size = write_header(path, model, vocab)
            print(f"built {path.name} in {time.perf_counter() - t0:.1f} s: header {header / 1e6:.2f} MB, "
                  f"{size / 1e9:.2f} GB apparent, {len(model.tensors)} tensors, {model.n_tokens} tokens, "
                  f"{model.n_merges} merges")
        out[key] = path
    return out


def commands(files: dict[str, Path], cold: bool, trees: list[str]) -> dict[str, tuple[list[str], dict[str, str]]]:
    """The commands to time: the baseline, check and inspect of both files (with the data cache off too when
    ``cold``), and the same again for each ``LABEL=DIR`` of ``trees`` (another source tree of qcheck, e.g. the
    commit before a change, run as ``python -m qcheck`` with DIR first on PYTHONPATH)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as installed: bytecode cached
    out = {BASELINE: ([sys.executable, "-c", "import click, rich.console"], env)}
    variants = [("", qcheck_command(), env)]
    for spec in trees:
        label, _, folder = spec.partition("=")
        variants.append((f" [{label}]", [sys.executable, "-m", "qcheck"],
                         {**env, "PYTHONPATH": os.pathsep.join(filter(None, (folder, env.get("PYTHONPATH"))))}))
    llama, gemma = str(files["llama31-8b-q4_k_m"]), str(files["gemma3-12b-q4_k_m"])
    for suffix, q, tree_env in variants:
        for name, path in (("llama-3.1-8b", llama), ("gemma-3-12b", gemma)):
            check = [*q, "check", path, "--engine", "vllm", "--gpu", "hopper"]
            inspect = [*q, "inspect", path]
            out[f"check {name} (vllm, hopper){suffix}"] = (check, tree_env)
            out[f"inspect {name}{suffix}"] = (inspect, tree_env)
            if cold and not suffix:  # (another tree may have no cache to turn off)
                off = {**tree_env, "QCHECK_CACHE": "off"}
                out[f"check {name}, cache off{suffix}"] = (check, off)
                out[f"inspect {name}, cache off{suffix}"] = (inspect, off)
    return out


def run(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system of the child) of one fresh process. It runs in the filesystem
    root: ``python -m`` puts the working directory first on sys.path, which would shadow a ``--tree``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=600,
                          cwd=os.path.abspath(os.sep))
    spent = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):  # 1: a check whose verdict is "does not run" is still a measured answer
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return spent, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def table(times: dict[str, list[float]], unit: str) -> None:
    base = times[BASELINE]
    print(f"| command | {unit}: median (min-max) | ratio of medians | per-round ratios |")
    print("|---|---:|---:|---|")
    for name, ts in times.items():
        ratios = " ".join(f"{t / b:.1f}" for t, b in zip(ts, base, strict=True))
        print(f"| {name} | {statistics.median(ts) * 1000:.0f} ms ({min(ts) * 1000:.0f}-{max(ts) * 1000:.0f}) | "
              f"{statistics.median(ts) / statistics.median(base):.2f}x | {ratios} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--workdir", type=Path, default=None, help="keep the built files here (reused next time)")
    parser.add_argument("--vocab-dir", type=Path, default=None, help="llama.cpp's models/ with ggml-vocab-*.gguf")
    parser.add_argument("--cold", action="store_true", help="also time check and inspect with the data cache off")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tree", action="append", default=[], metavar="LABEL=DIR",
                        help="also time the qcheck source tree DIR (e.g. an earlier commit: git archive REV | tar -x)")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="qcheck-startup-"))
    work.mkdir(parents=True, exist_ok=True)
    cmds = commands(build(work, args.vocab_dir), args.cold, args.tree)
    for cmd, env in cmds.values():  # warm-up: bytecode and caches, as on a user's second run
        run(cmd, env)
    load_before = os.getloadavg()
    wall: dict[str, list[float]] = {name: [] for name in cmds}
    cpu: dict[str, list[float]] = {name: [] for name in cmds}
    rng = random.Random(args.seed)
    for _ in range(args.rounds):
        order = list(cmds)
        rng.shuffle(order)
        for name in order:
            spent, used = run(*cmds[name])
            wall[name].append(spent)
            cpu[name].append(used)
    load_after = os.getloadavg()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {args.rounds} rounds; load average "
          f"{load_before[0]:.1f} before, {load_after[0]:.1f} after\n")
    table(wall, "wall")
    print()
    table(cpu, "CPU (user+sys)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
