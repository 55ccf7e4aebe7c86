"""Re-read the numbers matrix rules rest on from the released packages (matrices/tools/claims.toml).

    python matrices/tools/verify_claims.py                 # every claim (downloads each package once)
    python matrices/tools/verify_claims.py --engine vllm   # one engine's claims

Each package is fetched with `pip download --no-deps` (a wheel, or the sdist with `--no-binary :all:`) into a
temporary directory, the member whose path ends with the claim's `path` is read, and the claim's regex must
give the expected value. Prints one line per claim; exit 0 when every claim holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import io
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import tomllib

CLAIMS = Path(__file__).resolve().parent / "claims.toml"


def load_claims(path: Path = CLAIMS) -> list[dict[str, Any]]:
    claims = tomllib.loads(path.read_text()).get("claim", [])
    for i, c in enumerate(claims):
        missing = {"engine", "package", "version", "dist", "path", "pattern"} - set(c)
        modes = [k for k in ("expect", "expect_items", "present") if k in c]
        if missing or len(modes) != 1 or c["dist"] not in ("wheel", "sdist") or ("expect_items" in c) != ("item" in c):
            raise ValueError(f"claim #{i + 1}: needs {sorted(missing) or 'one of expect/expect_items/present'}")
    # `also_at = ["0.34.0"]`: the same claim re-read at later releases (one copy per version)
    return [dict(c, version=v) for c in claims for v in (c["version"], *c.get("also_at", ()))]


def read_member(archive: Path, suffix: str) -> str:
    """The text of the archive member whose path ends with ``suffix`` (a wheel/zip or an sdist .tar.gz)."""
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as zf:
            for name in zf.namelist():
                if name.endswith(suffix):
                    return zf.read(name).decode("utf-8", errors="replace")
    else:
        with tarfile.open(archive, "r:*") as tf:
            for member in tf.getmembers():
                if member.isfile() and member.name.endswith(suffix):
                    handle = tf.extractfile(member)
                    if handle is not None:
                        return io.TextIOWrapper(handle, encoding="utf-8", errors="replace").read()
    raise FileNotFoundError(f"{suffix} is not in {archive.name}")


def check(claim: dict[str, Any], text: str) -> str | None:
    """None when the claim holds in ``text``, else what was found instead."""
    match = re.search(claim["pattern"], text, re.MULTILINE)
    if "present" in claim:
        found = match is not None
        return None if found == bool(claim["present"]) else f"pattern {'found' if found else 'not found'}"
    if match is None:
        return "pattern not found"
    if match.re.groups < 1:
        return "the pattern has no group to compare"
    value = match.group(1)
    if "expect_items" in claim:
        items = re.findall(claim["item"], value)
        return None if items == list(claim["expect_items"]) else f"found {items}"
    return None if value == str(claim["expect"]) else f"found {value!r}"


def download(package: str, version: str, dist: str, into: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", f"{package}=={version}", "-d", str(into)]
    cmd += ["--no-binary", ":all:"] if dist == "sdist" else ["--only-binary", ":all:"]
    subprocess.run(cmd, check=True, capture_output=True)
    found = sorted(p for p in into.iterdir() if p.suffix in (".whl", ".gz", ".zip"))
    if not found:
        raise FileNotFoundError(f"pip downloaded nothing for {package}=={version}")
    return found[0]


def verify(claims: Iterable[dict[str, Any]], fetch=download) -> list[tuple[dict[str, Any], str | None]]:  # type: ignore[no-untyped-def]
    """(claim, problem or None) for every claim; ``fetch(package, version, dist, dir)`` gives the archive."""
    results: list[tuple[dict[str, Any], str | None]] = []
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for c in claims:
        groups.setdefault((c["package"], c["version"], c["dist"]), []).append(c)
    for (package, version, dist), group in groups.items():
        with tempfile.TemporaryDirectory() as tmp:
            try:
                archive = fetch(package, version, dist, Path(tmp))
            except (subprocess.CalledProcessError, FileNotFoundError) as exc:
                results += [(c, f"could not fetch {package}=={version}: {exc}") for c in group]
                continue
            for c in group:
                try:
                    results.append((c, check(c, read_member(archive, c["path"]))))
                except FileNotFoundError as exc:
                    results.append((c, str(exc)))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", help="only this engine's claims")
    parser.add_argument("--claims", type=Path, default=CLAIMS)
    args = parser.parse_args(argv)
    claims = [c for c in load_claims(args.claims) if args.engine in (None, c["engine"])]
    return report(verify(claims), lambda c: f"{c['engine']}: {c['package']} {c['version']} {c['path']} "
                                            f"({', '.join(c.get('rules', []))})")


def report(results: list[tuple[dict[str, Any], str | None]], describe: Callable[[dict[str, Any]], str]) -> int:
    """Print one line per claim (confirmed / UNFETCHED / DIFFERS, with the problem) and the total; the exit code."""
    for claim, problem in results:
        label = "confirmed" if problem is None else "UNFETCHED" if problem.startswith("could not fetch") else "DIFFERS  "
        print(f"{label} {describe(claim)}{'' if problem is None else ': ' + problem}")
    failed = sum(p is not None for _, p in results)
    print(f"{len(results) - failed} of {len(results)} claims confirmed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
