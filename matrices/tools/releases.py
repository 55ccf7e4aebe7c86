#!/usr/bin/env python3
"""Fetch engine releases from the package index and keep only their Python sources, for the extractors.

    python matrices/tools/releases.py vllm 0.9.0 0.10.2 ...   [--dest DIR]
    python matrices/tools/releases.py sglang 0.5.23

Each release is downloaded with ``pip download --no-deps --only-binary :all: PKG==X`` (the wheel users install),
hashed, and its ``*.py`` members are unpacked to ``DIR/PKG-X/`` (default ``$QCHECK_RELEASES`` or
``/tmp/qcheck-releases``) beside ``RELEASE.json`` (the wheel's file name, size and sha256); the wheel itself is
then deleted (a vLLM wheel is ~450 MB, its Python sources ~30 MB). Nothing fetched is ever committed: the
extractors read these trees and write only the facts they find, with the wheel's sha256 as provenance.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

DEFAULT_DEST = Path(os.environ.get("QCHECK_RELEASES", "/tmp/qcheck-releases"))
MANIFEST = "RELEASE.json"


def release_dir(package: str, version: str, dest: Path = DEFAULT_DEST) -> Path:
    """Where a fetched release's Python sources live."""
    return dest / f"{package}-{version}"


def manifest(tree: Path) -> dict[str, object]:
    """The wheel a fetched tree came from: {"package", "version", "file", "size", "sha256"}."""
    data = json.loads((tree / MANIFEST).read_text())
    if not isinstance(data, dict):
        raise SystemExit(f"{tree / MANIFEST}: not a JSON object")
    return data


def fetch(package: str, version: str, dest: Path = DEFAULT_DEST) -> Path:
    """Download one release's wheel, keep its Python sources and the wheel's hash; returns the tree."""
    tree = release_dir(package, version, dest)
    if (tree / MANIFEST).is_file():
        return tree
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-q",
                        f"{package}=={version}", "-d", tmp], check=True, stdout=subprocess.DEVNULL)
        wheels = sorted(Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            raise SystemExit(f"{package}=={version}: expected one wheel, got {[w.name for w in wheels]}")
        wheel = wheels[0]
        digest = hashlib.sha256()
        with wheel.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        staging = Path(tmp) / "tree"
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if name.endswith(".py") and ".." not in Path(name).parts and not name.startswith("/"):
                    target = staging / name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(z.read(name))
        (staging / MANIFEST).write_text(json.dumps({"package": package, "version": version, "file": wheel.name,
                                                    "size": wheel.stat().st_size,
                                                    "sha256": digest.hexdigest()}, indent=1) + "\n")
        staging.rename(tree)
    return tree


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("package")
    parser.add_argument("versions", nargs="+")
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    args = parser.parse_args(argv)
    args.dest.mkdir(parents=True, exist_ok=True)
    for version in args.versions:
        try:
            tree = fetch(args.package, version, args.dest)
        except subprocess.CalledProcessError as exc:
            print(f"{args.package} {version}: download failed ({exc})", file=sys.stderr)
            continue
        print(f"{args.package} {version}: {tree} ({manifest(tree)['sha256']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
