"""Every report format on the bundled examples, saved and diffed: the renderer-level complement of
``compare_outputs.py`` (which compares inspect/check JSON over a large corpus).

Runs ``inspect`` and ``check`` on each example in every ``--format`` (json, text, sarif, github, junit,
markdown), ``--all`` over the examples directory, ``gate`` with examples/qcheck.toml in every format, the Hub
target spellings that used to be classified differently (offline: they fail fast or are refused), and
``matrix --format json``, in one process per code tree through ``qcheck.cli.main``; exit code, stdout and
stderr are recorded, with the tree's absolute path replaced by ``<ROOT>``.

    git archive main | tar -x -C /tmp/base
    python bench/compare_formats.py /tmp/base /tmp/before.json
    python bench/compare_formats.py . /tmp/after.json
    python bench/compare_formats.py --diff /tmp/before.json /tmp/after.json
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

EXAMPLES = "examples"
CHECK_TARGETS = [["-e", "vllm", "-e", "llama.cpp", "-e", "sglang", "-e", "tensorrt-llm", "-g", "h100", "-g", "rtx-4090",
                  "-g", "cpu", "-g", "mi300x", "--context", "8192"],
                 ["-g", "h100"], ["-e", "vllm", "-g", "a100", "--require-native"]]
FORMATS = ["json", "text", "sarif", "github", "junit", "markdown"]


def commands(root: str) -> list[list[str]]:
    ex = os.path.join(root, EXAMPLES)
    names = sorted(n for n in os.listdir(ex) if n not in ("README.md", "make_examples.py", "qcheck.toml"))
    out: list[list[str]] = []
    for n in names:
        path = os.path.join(EXAMPLES, n)
        for fmt in FORMATS:
            out.append(["inspect", path, "--format", fmt])
        for i, t in enumerate(CHECK_TARGETS):
            for fmt in (FORMATS if i == 0 else ["json"]):
                out.append(["check", path, *t, "--format", fmt])
    out.append(["inspect", EXAMPLES, "--all", "--json"])
    out.append(["check", EXAMPLES, "--all", "-e", "llama.cpp", "-g", "cpu", "--json"])
    for fmt in FORMATS:
        out.append(["gate", "--config", os.path.join(EXAMPLES, "qcheck.toml"), "--format", fmt])
    for bad in ["hf.co/org/name", "_org/name", "http://huggingface.co/a/b", "org/na--me", "nope/x.gguf",
                "https://example.com/a/b", "https://huggingface.co/datasets/a/b"]:
        out.append(["inspect", bad, "--json"])
    out.append(["matrix", "--format", "json"])
    return out


def main() -> None:
    if sys.argv[1] == "--diff":
        with open(sys.argv[2]) as fa, open(sys.argv[3]) as fb:
            a, b = json.load(fa), json.load(fb)
        same = diff = 0
        for k in a:
            if a[k] == b.get(k):
                same += 1
            else:
                diff += 1
                print("DIFF", k)
                for i, label in enumerate(("exit", "stdout", "stderr")):
                    if a[k][i] != b[k][i]:
                        print(f"  {label}: {str(a[k][i])[:600]!r}\n  -> {str(b[k][i])[:600]!r}")
        print(f"{same} identical, {diff} different, {len(set(b) - set(a))} only in the second")
        return
    root, out_path = os.path.abspath(sys.argv[1]), sys.argv[2]
    cmds = commands(root)
    script = ("import sys, json, io, os, contextlib\n"
              "from qcheck.cli import main\n"
              "cmds = json.load(sys.stdin)\n"
              "os.environ.update({'HF_ENDPOINT': 'http://127.0.0.1:9', 'COLUMNS': '100', 'NO_COLOR': '1'})\n"
              "for k in ('HF_HUB_OFFLINE', 'GITHUB_STEP_SUMMARY', 'GITHUB_WORKSPACE', 'GITHUB_ACTIONS'):\n"
              "    os.environ.pop(k, None)\n"
              "res = {}\n"
              "for c in cmds:\n"
              "    out, err = io.StringIO(), io.StringIO()\n"
              "    code = 0\n"
              "    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):\n"
              "        try:\n"
              "            main(c)\n"
              "        except SystemExit as e:\n"
              "            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)\n"
              "    res[' '.join(c)] = [code, out.getvalue(), err.getvalue()]\n"
              "sys.__stdout__.write(json.dumps(res))\n")
    env = dict(os.environ, PYTHONPATH=root)
    proc = subprocess.run([sys.executable, "-c", script], input=json.dumps(cmds), capture_output=True, text=True,
                          cwd=root, env=env, check=False)
    if proc.returncode:
        sys.exit(proc.stderr)
    data = json.loads(proc.stdout.replace(json.dumps(root)[1:-1], "<ROOT>"))
    with open(out_path, "w") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
    print(f"{len(data)} commands")


if __name__ == "__main__":
    main()
