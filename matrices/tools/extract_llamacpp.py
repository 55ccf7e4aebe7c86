#!/usr/bin/env python3
"""Generate matrices/generated/llama.cpp.toml (and its facts file) from llama.cpp's released source, build by build.

llama.cpp publishes no package of its own here; two registries carry its source at known builds:

* npm ``node-llama-cpp``: each release bundles a git bundle of llama.cpp at a release tag (``bNNNN``, named in
  ``llama/binariesGithubRelease.json``);
* PyPI ``llama-cpp-python``: each sdist vendors llama.cpp (``vendor/llama.cpp``) at the commit its CHANGELOG
  names; the commit's build number is a public pin, recorded in ``RELEASES`` and checked against the CHANGELOG.

    python matrices/tools/extract_llamacpp.py fetch [--releases DIR]   # download every release of RELEASES, keep
                                                                      # only the files the readers open
    nice -n 15 python matrices/tools/extract_llamacpp.py [--releases DIR]   # read them, write both files
    python matrices/tools/extract_llamacpp.py --check                  # offline: the rules re-derived from the
                                                                      # facts file, both files byte for byte
    python matrices/tools/extract_llamacpp.py --check --releases DIR   # and the facts re-read from the releases

DIR defaults to ``$QCHECK_RELEASES`` or ``/tmp/qcheck-releases``; nothing fetched is committed. What is read (the
GGML type list, gguf.cpp's refusal of unknown types, the KV-cache types, the -fa auto behaviour, each backend's
supports_op for matmuls and flash attention, Metal's and SYCL's kernel tables) is in llamacpp_read.py; how the
facts become rules is ``derive`` below, and matrices/SCHEMA.md §2.3'' describes both files.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import llamacpp_read as read
from cpp_facts import Shape
from llamacpp_rules import derive, render_rules
from llamacpp_rules import toml_value as _toml

REPO = Path(__file__).resolve().parent.parent.parent
FACTS = REPO / "matrices" / "generated" / "llama.cpp.facts.toml"
RULES = REPO / "matrices" / "generated" / "llama.cpp.toml"
DEFAULT_DEST = Path(os.environ.get("QCHECK_RELEASES", "/tmp/qcheck-releases"))
COMMAND = "python matrices/tools/extract_llamacpp.py"
MANIFEST = "RELEASE.json"


@dataclass(frozen=True)
class Release:
    """A llama.cpp build and the package that carries its source."""

    build: str
    package: str  # "node-llama-cpp" | "llama-cpp-python"
    version: str
    commit: str = ""  # llama-cpp-python: the commit its CHANGELOG names for this release
    pin: str = ""  # llama-cpp-python: where the commit's build number was read


#: every release read, oldest build first. The llama-cpp-python commits' build numbers are public pins
#: (several independent ones each: server logs 'b8942-f53577432', build files 'LLAMA_CPP_BUILD_NUMBER := 9445 /
#: LLAMA_CPP_COMMIT := af6528e6...'); node-llama-cpp names its build itself. 3.21.1/3.22.x bundle llama.cpp's
#: semantic-version tags (v0.4.0, v0.5.0), whose build numbers are not established: not read.
RELEASES: tuple[Release, ...] = (
    Release("b6122", "node-llama-cpp", "3.12.0"), Release("b6133", "node-llama-cpp", "3.12.1"),
    Release("b6301", "node-llama-cpp", "3.12.4"), Release("b6431", "node-llama-cpp", "3.13.0"),
    Release("b6673", "node-llama-cpp", "3.14.0"), Release("b6845", "node-llama-cpp", "3.14.2"),
    Release("b7324", "node-llama-cpp", "3.14.4"), Release("b7347", "node-llama-cpp", "3.14.5"),
    Release("b7698", "node-llama-cpp", "3.15.0"), Release("b7836", "node-llama-cpp", "3.15.1"),
    Release("b8095", "node-llama-cpp", "3.16.0"), Release("b8121", "node-llama-cpp", "3.16.2"),
    Release("b8179", "node-llama-cpp", "3.17.1"), Release("b8352", "node-llama-cpp", "3.18.0"),
    Release("b8390", "node-llama-cpp", "3.18.1"),
    Release("b8942", "llama-cpp-python", "0.3.21", "f53577432",
            "'b8942-f53577432' (llama-server system_fingerprint) and 'version 8942 at upstream commit f53577432541'"),
    Release("b9102", "llama-cpp-python", "0.3.23", "7d442abf", "'llama-server v9102 (7d442abf5)'"),
    Release("b9445", "llama-cpp-python", "0.3.24", "af6528e6d",
            "'b9445-af6528e6d' (server build info) and 'LLAMA_CPP_BUILD_NUMBER := 9445, LLAMA_CPP_COMMIT := "
            "af6528e6df5d'"),
    Release("b9842", "node-llama-cpp", "3.19.0"), Release("b10068", "node-llama-cpp", "3.19.1"),
    Release("b10361", "node-llama-cpp", "3.20.0"),
    Release("b11312", "llama-cpp-python", "0.3.36", "0c1e57098", "'b11312-0c1e57098' (several build logs)"),
)

#: GGML types that are never a GGUF weight matrix (activation/dot-product and integer types)
NOT_WEIGHTS = frozenset({"Q8_1", "Q8_K", "I8", "I16", "I32", "I64", "F64"})
UNQUANTISED = frozenset({"f32", "f16", "bf16"})


# --------------------------------------------------------------------------------------------------------------
# fetching

def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _wanted(path: str) -> bool:
    return any(fnmatch.fnmatchcase(path, pattern) for pattern in read.FILES)


def _run(cmd: list[str], cwd: Path) -> str:
    return subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True).stdout


def fetch(release: Release, dest: Path) -> Path:
    """Download one release, keep the files the readers open under ``dest/llama.cpp-<build>/``, delete the rest."""
    tree = dest / f"llama.cpp-{release.build}"
    if (tree / MANIFEST).is_file():
        return tree
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        work = Path(tmp)
        staging = work / "tree"
        if release.package == "node-llama-cpp":
            package = _fetch_npm(release, work, staging)
        else:
            package = _fetch_sdist(release, work, staging)
        (staging / MANIFEST).write_text(json.dumps({
            "build": release.build, "package": release.package, "version": release.version,
            "file": package.name, "sha256": _sha256(package)}, indent=1) + "\n")
        staging.rename(tree)
    return tree


def _fetch_npm(release: Release, work: Path, staging: Path) -> Path:
    _run(["npm", "pack", "--silent", f"node-llama-cpp@{release.version}"], work)
    tgz = next(work.glob("*.tgz"))
    with tarfile.open(tgz) as t:
        named = json.load(t.extractfile("package/llama/binariesGithubRelease.json"))["release"]  # type: ignore[arg-type]
        bundle = work / "r.bundle"
        bundle.write_bytes(t.extractfile("package/llama/gitRelease.bundle").read())  # type: ignore[union-attr]
    if named != release.build:
        raise SystemExit(f"node-llama-cpp {release.version} bundles llama.cpp {named}, not {release.build}")
    _run(["git", "init", "-q", "--bare", "g"], work)
    _run(["git", "--git-dir", "g", "fetch", "-q", str(bundle), "HEAD:refs/heads/rel"], work)
    for path in _run(["git", "--git-dir", "g", "ls-tree", "-r", "--name-only", "rel"], work).split("\n"):
        if path and _wanted(path):
            target = staging / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(subprocess.run(["git", "--git-dir", "g", "show", f"rel:{path}"], cwd=work,
                                              check=True, capture_output=True).stdout)
    return tgz


def _fetch_sdist(release: Release, work: Path, staging: Path) -> Path:
    _run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
          f"llama-cpp-python=={release.version}", "-d", str(work)], work)
    sdist = next(work.glob("*.tar.gz"))
    with tarfile.open(sdist) as t:
        for member in t:
            parts = member.name.split("/", 1)
            if not member.isfile() or len(parts) < 2:
                continue
            if parts[1] == "CHANGELOG.md":
                _check_changelog(release, t.extractfile(member).read().decode())  # type: ignore[union-attr]
            if parts[1].startswith("vendor/llama.cpp/"):
                path = parts[1][len("vendor/llama.cpp/"):]
                if _wanted(path) and ".." not in path.split("/"):
                    target = staging / path
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(t.extractfile(member).read())  # type: ignore[union-attr]
    return sdist


def _check_changelog(release: Release, changelog: str) -> None:
    section = re.search(rf"^## \[{re.escape(release.version)}\]\n(.*?)(?=^## \[)", changelog, re.S | re.M)
    named = re.findall(r"llama\.cpp@([0-9a-f]{7,40})", section.group(1)) if section else []
    if not named or not named[0].startswith(release.commit):
        raise SystemExit(f"llama-cpp-python {release.version}: its CHANGELOG names llama.cpp@{named[:1]}, not "
                         f"{release.commit}")


def sources_sha256(tree: Path) -> str:
    """One hash over the files read (path, then bytes, in path order): what the facts were read from."""
    digest = hashlib.sha256()
    for path in sorted(p for p in tree.rglob("*") if p.is_file() and p.name != MANIFEST):
        rel = path.relative_to(tree).as_posix()
        digest.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


# --------------------------------------------------------------------------------------------------------------
# reading a tree

FactKey = tuple[str, str]


def read_tree(tree: Path) -> dict[FactKey, read.Read]:
    """Every fact of one build; a fact whose code has an unknown shape is ``Read("unread: <why>", file, "")``."""
    t = read.Tree(tree)
    out: dict[FactKey, read.Read] = {}

    def put(key: FactKey, fn: Any, *args: Any) -> read.Read | None:
        try:
            out[key] = fn(t, *args)
        except Shape as exc:
            out[key] = read.Read(f"unread: {exc}", "", "")
            return None
        return out[key]

    types = put(("ggml-types", "ggml_type"), read.ggml_types)
    put(("gguf-refuses", "unknown type"), read.gguf_refuses)
    kv = put(("kv-cache-types", "--cache-type-k/-v"), read.kv_cache_types)
    put(("fa-auto", "quantised V"), read.fa_auto)
    weights = [x for x in types.value if x not in NOT_WEIGHTS] if types else []
    for backend in read.BACKENDS:
        if backend != "cpu" and types:
            refused = put(("mul-mat", backend), read.mul_mat, backend, weights)
            if backend in ("metal", "sycl") and refused:
                accepted = [x for x in weights if x not in refused.value]
                put(("mul-mat-abort", backend), read.mul_mat_abort, backend, accepted)
        if kv:
            put(("flash-attn", backend), read.flash_attn, backend, kv.value)
    return out


# --------------------------------------------------------------------------------------------------------------
# facts file

def histories(per_release: dict[str, dict[FactKey, read.Read]]) -> dict[FactKey, list[dict[str, Any]]]:
    """Per fact, the steps of equal value over the releases read (in order): {value, from, to, file, lines}."""
    out: dict[FactKey, list[dict[str, Any]]] = {}
    for build, facts in per_release.items():
        for key, fact in facts.items():
            steps = out.setdefault(key, [])
            if steps and steps[-1]["value"] == fact.value and steps[-1]["to"] == _previous(per_release, build):
                steps[-1]["to"] = build
                steps[-1]["lines_to"] = f"{fact.file}{fact.lines}"
            else:
                steps.append({"value": fact.value, "from": build, "to": build,
                              "lines_from": f"{fact.file}{fact.lines}", "lines_to": f"{fact.file}{fact.lines}"})
    return out


def _previous(per_release: dict[str, Any], build: str) -> str | None:
    order = list(per_release)
    i = order.index(build)
    return order[i - 1] if i else None


def render_facts(manifests: dict[str, dict[str, str]], hist: dict[FactKey, list[dict[str, Any]]]) -> str:
    lines = [
        "# What llama.cpp's released source says, build by build. GENERATED by "
        f"{COMMAND}; do not edit by hand.",
        "# Each [[fact]] gives its value per run of builds read (from..to, both read; the builds between were not);",
        "# note = the file and lines it was read from (at from .. at to).",
        "",
        "[facts]",
        'engine = "llama.cpp"',
        f'generated_by = "{COMMAND}"',
        f"releases = {_toml(list(manifests))}",
        "",
        "[facts.read]",
    ]
    for build, m in manifests.items():
        lines.append(f'"{build}" = {{ file = {_toml(m["file"])}, sha256 = "{m["sha256"]}", '
                     f'sources_sha256 = "{m["sources_sha256"]}" }}')
    for (kind, key), steps in sorted(hist.items()):
        files = sorted({s["lines_from"].split(":")[0] for s in steps if s["lines_from"].split(":")[0]})
        lines += ["", "[[fact]]", f"kind = {_toml(kind)}", f"key = {_toml(key)}"]
        if files:
            lines.append(f"file = {_toml(files[0])}")
        lines.append("history = [")
        for s in steps:
            where = s["lines_from"] if s["lines_from"] == s["lines_to"] else f"{s['lines_from']} .. {s['lines_to']}"
            lines.append(f"  {{ from = \"{s['from']}\", to = \"{s['to']}\", note = {_toml(where)}, "
                         f"value = {_toml(s['value'])} }},")
        lines.append("]")
    return "\n".join(lines) + "\n"


def parse_facts(text: str) -> tuple[dict[str, dict[str, str]], dict[FactKey, list[dict[str, Any]]]]:
    """The facts file back into (manifests, histories): what ``derive`` needs, offline."""
    import tomllib

    data = tomllib.loads(text)
    manifests = {b: dict(v) for b, v in data["facts"]["read"].items()}
    manifests = {b: manifests[b] for b in data["facts"]["releases"]}
    hist: dict[FactKey, list[dict[str, Any]]] = {}
    for fact in data.get("fact", []):
        steps = []
        for s in fact["history"]:
            ends = s.get("note", "").split(" .. ")
            steps.append({"value": s["value"], "from": s["from"], "to": s["to"], "lines_from": ends[0],
                          "lines_to": ends[-1]})
        hist[(fact["kind"], fact["key"])] = steps
    return manifests, hist


def listed_versions(hist: dict[FactKey, list[dict[str, Any]]], releases: Sequence[str]) -> list[str]:
    """The builds where a generated table changes, plus the newest read: the versions the engine file lists."""
    firsts = {s["from"] for steps in hist.values() for s in steps} | {releases[-1]}
    return [b for b in releases if b in firsts]


# --------------------------------------------------------------------------------------------------------------
# command line

def extract(dest: Path) -> tuple[dict[str, dict[str, str]], dict[FactKey, list[dict[str, Any]]]]:
    per_release: dict[str, dict[FactKey, read.Read]] = {}
    manifests: dict[str, dict[str, str]] = {}
    for release in RELEASES:
        tree = dest / f"llama.cpp-{release.build}"
        if not (tree / MANIFEST).is_file():
            raise SystemExit(f"{tree} is missing: run '{COMMAND} fetch --releases {dest}' first")
        m = json.loads((tree / MANIFEST).read_text())
        manifests[release.build] = {"file": f"{m['file']} ({m['package']} {m['version']})", "sha256": m["sha256"],
                                    "sources_sha256": sources_sha256(tree)}
        per_release[release.build] = read_tree(tree)
    return manifests, histories(per_release)


def outputs(manifests: dict[str, dict[str, str]], hist: dict[FactKey, list[dict[str, Any]]]) -> tuple[str, str]:
    return render_facts(manifests, hist), render_rules(derive(manifests, hist, RELEASES))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="?", choices=["fetch", "extract"], default="extract")
    parser.add_argument("--releases", type=Path, default=None, help=f"release trees (default {DEFAULT_DEST})")
    parser.add_argument("--check", action="store_true", help="verify the checked-in files instead of writing them")
    args = parser.parse_args(argv)
    dest = args.releases or DEFAULT_DEST
    if args.command == "fetch":
        for release in RELEASES:
            print(f"{release.build}: {fetch(release, dest)}", file=sys.stderr)
        return 0
    if args.check:
        manifests, hist = parse_facts(FACTS.read_text())
        if args.releases is not None:
            manifests, hist = extract(dest)
        want_facts, want_rules = outputs(manifests, hist)
        bad = [p for p, want in ((FACTS, want_facts), (RULES, want_rules)) if not p.is_file() or p.read_text() != want]
        for p in bad:
            print(f"{p.relative_to(REPO)}: differs from what {COMMAND} derives"
                  f"{' from the releases' if args.releases else ' from the facts file'}", file=sys.stderr)
        if not bad:
            print(f"{FACTS.relative_to(REPO)} and {RULES.relative_to(REPO)}: up to date "
                  f"({len(manifests)} builds, {len(hist)} facts)")
        return 1 if bad else 0
    manifests, hist = extract(dest)
    facts_text, rules_text = outputs(manifests, hist)
    FACTS.parent.mkdir(parents=True, exist_ok=True)
    FACTS.write_text(facts_text)
    RULES.write_text(rules_text)
    print(f"wrote {FACTS.relative_to(REPO)} and {RULES.relative_to(REPO)} ({len(manifests)} builds); the engine "
          f"file should list {', '.join(listed_versions(hist, list(manifests)))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
