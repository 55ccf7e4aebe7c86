"""Re-check the code evidence of matrices/known_issues.toml against the released packages.

    python matrices/tools/verify_known_issues.py                    # every issue's claims
    python matrices/tools/verify_known_issues.py --issue ID         # one issue
    python matrices/tools/verify_known_issues.py --at vllm=0.35.0   # refresh: the same claims at another release
    python matrices/tools/verify_known_issues.py --every-covered-version --releases /tmp/qcheck-releases
        # each claim also at every release the engine file lists inside the issue's `versions` (its own package only)

Each ``[[issue.claims]]`` is a matrices/tools/claims.toml claim (package, version, dist, path, pattern and expect,
expect_items or present), checked by verify_claims.py's code: the package is fetched with ``pip download --no-deps``
and the pattern run on the named file. ``--at PACKAGE=VERSION`` re-runs the claims of that package at another
release: when an open issue's claims still hold there, its ``versions`` range can be extended to it; when a claim
stops holding, the code changed (a fix, or a move) and the entry must be re-read before its range is extended.
Prints one line per claim; exit 0 when every claim holds, 1 otherwise. Tracker state (open, fixed) is not fetched:
there is no tracker access here, only the package index, so ``tracker_state`` stays as read.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tomllib

sys.path.insert(0, str(Path(__file__).resolve().parent))
import verify_claims

ISSUES = Path(__file__).resolve().parents[1] / "known_issues.toml"


def load_issue_claims(path: Path = ISSUES, only: str | None = None,
                      at: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The claims of every issue (or of ``only``) as verify_claims claims, each tagged with its issue id; ``at``
    moves every claim of a package to another version."""
    issues = tomllib.loads(path.read_text(encoding="utf-8")).get("issue", [])
    out = []
    for issue in issues:
        if only is not None and issue.get("id") != only:
            continue
        for claim in issue.get("claims", []):
            moved = dict(claim, engine=issue["engine"], rules=[issue["id"]])
            if at and claim["package"] in at:
                moved["version"] = at[claim["package"]]
            out.append(moved)
    return out


def at_covered_versions(claims: list[dict[str, Any]], path: Path = ISSUES) -> list[dict[str, Any]]:
    """Every claim also at each release its engine file lists inside the issue's ``versions`` (claims on the engine's
    own package; a dependency's or another package's claims stay where they were read)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from qcheck.matrix.loader import load_matrix
    from qcheck.matrix.versions import contains, parse_specifier, parse_version

    matrix = load_matrix()
    ranges = {i["id"]: i.get("versions") for i in tomllib.loads(path.read_text(encoding="utf-8")).get("issue", [])}
    out: list[dict[str, Any]] = []
    for claim in claims:
        out.append(claim)
        engine = matrix.engines[claim["engine"]]
        spec = ranges.get(claim["rules"][0])
        if spec is None or claim["package"] != engine.id:
            continue
        within = parse_specifier(spec, engine.scheme)
        out += [dict(claim, version=v) for v in engine.versions
                if v != claim["version"] and contains(within, parse_version(v, engine.scheme))]
    return list({(c["rules"][0], c["path"], c["pattern"], c["version"]): c for c in out}.values())


def main(argv: list[str] | None = None,
         fetch: Callable[[str, str, str, Path], Path] = verify_claims.download) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--issue", help="only this issue's claims")
    parser.add_argument("--at", action="append", default=[], metavar="PACKAGE=VERSION",
                        help="check that package's claims at another release (repeatable)")
    parser.add_argument("--issues", type=Path, default=ISSUES)
    parser.add_argument("--every-covered-version", action="store_true",
                        help="also check each claim at every listed release inside the issue's versions")
    parser.add_argument("--releases", type=Path, help="read wheels' Python sources from these fetched trees")
    args = parser.parse_args(argv)
    at = dict(item.split("=", 1) for item in args.at if "=" in item)
    claims = load_issue_claims(args.issues, args.issue, at)
    if not claims:
        print("no claims to check")
        return 1
    if args.every_covered_version:
        claims = at_covered_versions(claims, args.issues)
    if args.releases:
        fetch = verify_claims.tree_or_download(args.releases)
    return verify_claims.report(verify_claims.verify(claims, fetch),
                                lambda c: f"{c['rules'][0]}: {c['package']} {c['version']} {c['path']}")


if __name__ == "__main__":
    sys.exit(main())
