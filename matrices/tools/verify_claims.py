"""Re-read the numbers matrix rules rest on from the released packages (matrices/tools/claims.toml).

    python matrices/tools/verify_claims.py                 # every claim (downloads each package once)
    python matrices/tools/verify_claims.py --engine vllm   # one engine's claims
    python matrices/tools/verify_claims.py --engine vllm --every-covered-version --releases /tmp/qcheck-releases
        # each claim also at every listed version all its rules answer (their `verified` range within `versions`),
        # read from the trees matrices/tools/releases.py fetched (pip download where a tree is missing)

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


#: per-release variants of a claim: `path_at`, `pattern_at`, `expect_at` = { "<0.14.0" = ... } (a PEP 440 specifier ->
#: the value at the releases it contains; the first that holds wins), and `checked_from = "0.14.0"` (the oldest
#: release --every-covered-version checks it at: the code had another shape before)
VARIANTS = ("path", "pattern", "expect")


def at_version(claim: dict[str, Any]) -> dict[str, Any]:
    """The claim as it reads at its ``version``: each ``<key>_at`` entry whose specifier holds replaces ``<key>``."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    out = dict(claim)
    for key in VARIANTS:
        for spec, value in claim.get(f"{key}_at", {}).items():
            if Version(claim["version"]) in SpecifierSet(spec):
                out[key] = value
                break
    return out


def read_member(archive: Path, suffix: str) -> str:
    """The text of the archive member whose path ends with ``suffix`` (a wheel/zip, an sdist .tar.gz, or a release
    tree written by releases.py)."""
    if archive.is_dir():
        for path in sorted(archive.rglob("*")):
            if path.is_file() and path.as_posix().endswith(suffix):
                return path.read_text(encoding="utf-8", errors="replace")
        raise FileNotFoundError(f"{suffix} is not in {archive.name}")
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


def covered_versions(claim: dict[str, Any], matrix: Any) -> list[str]:
    """The versions the engine file lists at which every rule the claim names answers: inside its ``versions`` and
    read there (``verified``); [] when no named rule states ``verified`` (a file not migrated, or no such rule)."""
    from qcheck.matrix.versions import contains, parse_version

    engine = matrix.engines.get(claim["engine"]) if claim["engine"] in matrix.engines else None
    if engine is None:
        return []
    pool = {r.id: r for r in [*engine.rules, *(k.rule for k in engine.kv_rules),
                              *(a.rule for a in engine.attention_rules), *(s.rule for s in engine.kv_scale_rules)]}
    rules = [pool[r] for r in claim.get("rules", []) if r in pool and pool[r].verified is not None]
    if not rules:
        return []
    out = []
    for version in engine.versions:
        at = parse_version(version, engine.scheme)
        if all((r.versions is None or contains(r.versions, at)) and r.verified is not None and r.verified.covers(at)
               for r in rules):
            out.append(version)
    return out


def at_covered_versions(claims: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every claim at its own version(s) and at each listed version its rules answer (one copy per version)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from qcheck.matrix.loader import load_matrix

    matrix = load_matrix()
    out: list[dict[str, Any]] = []
    seen: set[tuple[str, str, str, str, str]] = set()
    # a release another claim of the same rules and file is written for (the code's shape there) is that claim's
    explicit = {(c["path"], str(c.get("rules")), c["version"]) for c in claims}
    for claim in claims:
        # only the engine's own package is listed per release (a dependency's claims stay at their version)
        more = covered_versions(claim, matrix) if claim["engine"] == claim["package"] else []
        if "checked_from" in claim:
            from packaging.version import Version

            more = [v for v in more if Version(v) >= Version(claim["checked_from"])]
        more = [v for v in more if (claim["path"], str(claim.get("rules")), v) not in explicit]
        for version in [claim["version"], *more]:
            key = (claim["package"], claim["path"], claim["pattern"], str(claim.get("rules")), version)
            if key not in seen:
                seen.add(key)
                out.append(dict(claim, version=version))
    return out


def tree_or_download(root: Path) -> Callable[[str, str, str, Path], Path]:
    """A ``fetch`` reading a wheel's Python sources from ``root`` (matrices/tools/releases.py), else ``download``."""
    def fetch(package: str, version: str, dist: str, into: Path) -> Path:
        tree = root / f"{package}-{version}"
        if dist == "wheel" and (tree / "RELEASE.json").is_file():
            return tree
        return download(package, version, dist, into)
    return fetch


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
                c = at_version(c)
                try:
                    results.append((c, check(c, read_member(archive, c["path"]))))
                except FileNotFoundError as exc:
                    results.append((c, str(exc)))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", help="only this engine's claims")
    parser.add_argument("--claims", type=Path, default=CLAIMS)
    parser.add_argument("--every-covered-version", action="store_true",
                        help="also check each claim at every listed version all its rules answer")
    parser.add_argument("--releases", type=Path, help="read wheels' Python sources from these fetched trees")
    args = parser.parse_args(argv)
    claims = [c for c in load_claims(args.claims) if args.engine in (None, c["engine"])]
    if args.every_covered_version:
        claims = at_covered_versions(claims)
    fetch = tree_or_download(args.releases) if args.releases else download
    return report(verify(claims, fetch), lambda c: f"{c['engine']}: {c['package']} {c['version']} {c['path']} "
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
