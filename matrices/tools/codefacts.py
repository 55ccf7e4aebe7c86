"""Shared machinery of the code-fact extractors (extract_vllm.py, extract_sglang.py): read a release's Python sources
with ``ast``, keep what each fact is (a list, a number, a decision list of conditions and results), merge the facts of
every release into histories, and render/parse the two checked-in files of matrices/SCHEMA.md §2.3''.

Nothing here imports the engines: their sources are parsed, never executed. Every file read is hashed, so the facts
file records which bytes each release's facts came from (``sources_sha256``) beside the wheel's own sha256.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import itertools
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from releases import DEFAULT_DEST, manifest, release_dir  # noqa: E402

#: a fact's value: what TOML can hold and JSON can compare
Value = Any


class Tree:
    """One release's Python sources (a directory written by releases.py, or a test fixture): files are read by their
    path inside the package, parsed once, and hashed as they are read."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.read: dict[str, str] = {}
        self._ast: dict[str, ast.Module] = {}

    def exists(self, path: str) -> bool:
        return (self.root / path).is_file()

    def text(self, path: str) -> str:
        data = (self.root / path).read_bytes()
        self.read[path] = hashlib.sha256(data).hexdigest()
        return data.decode("utf-8")

    def module(self, path: str) -> ast.Module | None:
        """The parsed file, or None when the release has no such file."""
        if path not in self._ast:
            if not self.exists(path):
                return None
            self._ast[path] = ast.parse(self.text(path), filename=path)
        return self._ast[path]

    def files(self, directory: str) -> list[str]:
        """Every ``*.py`` under ``directory`` (package-relative), sorted."""
        base = self.root / directory
        if not base.is_dir():
            return []
        return sorted(p.relative_to(self.root).as_posix() for p in base.rglob("*.py"))

    def first(self, *paths: str) -> str | None:
        """The first of ``paths`` this release has (code moves between releases)."""
        return next((p for p in paths if self.exists(p)), None)

    def sources_sha256(self) -> str:
        """One hash over every file read (path and content hash, sorted): what the facts were extracted from."""
        digest = hashlib.sha256()
        for path in sorted(self.read):
            digest.update(f"{path}\0{self.read[path]}\n".encode())
        return digest.hexdigest()


# --------------------------------------------------------------------------------------------------------------
# AST readers


def unparse(node: ast.AST) -> str:
    """Source text of a node, as ``ast.unparse`` normalises it (formatting changes do not change facts)."""
    return " ".join(ast.unparse(node).split())


def strings(node: ast.AST | None) -> list[str] | None:
    """The string constants of a list/tuple/set literal, or of ``Literal["a", "b"]``; None for anything else."""
    if isinstance(node, ast.Subscript):
        node = node.slice
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        out = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        return out if len(out) == len(node.elts) else None
    return None


def assigned(module: ast.Module | ast.ClassDef, name: str) -> ast.expr | None:
    """The value assigned to ``name`` at the top of a module or class body (``x = ...`` or ``x: T = ...``)."""
    for stmt in module.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
            return stmt.value
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name:
            return stmt.value
    return None


def classes(module: ast.Module) -> list[ast.ClassDef]:
    return [n for n in ast.walk(module) if isinstance(n, ast.ClassDef)]


def function(scope: ast.Module | ast.ClassDef, name: str) -> ast.FunctionDef | None:
    """A function (or method) named ``name`` defined directly in ``scope``, or anywhere in a module."""
    body = scope.body if isinstance(scope, ast.ClassDef) else list(ast.walk(scope))
    return next((n for n in body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def method_int(cls: ast.ClassDef, name: str) -> int | str | None:
    """What ``cls.name()`` returns when its body is ``return <int>`` (or ``return Other.name()``: the other class's
    name, resolved by the caller); None when there is no such method or it computes something else."""
    fn = function(cls, name)
    if fn is None:
        return None
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        return None
    value = body[0].value
    if isinstance(value, ast.Constant) and isinstance(value.value, int):
        return value.value
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub) and isinstance(value.operand, ast.Constant):
        return -int(value.operand.value)
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == name \
            and isinstance(value.func.value, ast.Name):
        return value.func.value.id
    return None


def short(node: ast.expr) -> str:
    """A returned value as a decision shows it: a constructor call by its class name, anything else as written."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id[:1].isupper():
        return node.func.id
    return unparse(node)


def decisions(body: Sequence[ast.stmt], conditions: tuple[str, ...] = ()) -> list[str]:
    """A function body as a decision list: ``cond1; cond2 -> value`` for every ``return``/``raise`` in source order:
    the first whose conditions hold wins (a test an earlier ``return`` already excluded is not repeated on the lines
    after it, which keeps each line readable and lets a reader match a branch by its own test)."""
    out: list[str] = []
    for stmt in body:
        if isinstance(stmt, ast.If):
            test = unparse(stmt.test)
            out += decisions(stmt.body, (*conditions, test))
            out += decisions(stmt.orelse, (*conditions, f"not ({test})"))
        elif isinstance(stmt, ast.Return) and stmt.value is not None:
            out.append(_decision(conditions, short(stmt.value)))
        elif isinstance(stmt, ast.Raise) and stmt.exc is not None:
            exc = stmt.exc
            shown = unparse(exc.args[0]) if isinstance(exc, ast.Call) and exc.args else unparse(exc)
            name = exc.func.id if isinstance(exc, ast.Call) and isinstance(exc.func, ast.Name) else "raise"
            out.append(_decision(conditions, f"raise {name}: {shown}"))
        elif isinstance(stmt, (ast.With, ast.For, ast.While, ast.Try)):
            out += decisions(stmt.body, conditions)
    return out


def _decision(conditions: tuple[str, ...], result: str) -> str:
    return f"{'; '.join(conditions) or 'always'} -> {result}"


def names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


# --------------------------------------------------------------------------------------------------------------
# facts per release -> histories -> TOML


@dataclass
class Facts:
    """The facts of one release: (kind, key) -> (value, file it was read from)."""

    values: dict[tuple[str, str], tuple[Value, str]] = field(default_factory=dict)

    def add(self, kind: str, key: str, value: Value, file: str) -> None:
        if value is None or value == [] or value == "":
            return
        self.values[(kind, key)] = (value, file)


@dataclass
class Release:
    version: str
    file: str
    sha256: str
    sources_sha256: str
    facts: Facts


def histories(releases: Sequence[Release]) -> list[dict[str, Any]]:
    """Every fact's history over the releases read: consecutive releases with the same value and file merge into one
    step; a release without the fact ends the step (the fact is absent there)."""
    keys = sorted({k for r in releases for k in r.facts.values})
    out = []
    for kind, key in keys:
        steps: list[dict[str, Any]] = []
        previous: tuple[Value, str] | None = None
        for release in releases:
            current = release.facts.values.get((kind, key))
            if current is None:
                previous = None
                continue
            if previous is not None and _same(current, previous) and steps:
                steps[-1]["to"] = release.version
            else:
                steps.append({"value": current[0], "from": release.version, "to": release.version,
                              "file": current[1]})
            previous = current
        out.append({"kind": kind, "key": key, "history": steps})
    return out


def _same(a: tuple[Value, str], b: tuple[Value, str]) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def value_at(fact: dict[str, Any], version: str, order: dict[str, int]) -> Value:
    """A fact's value at one release read (None: absent there)."""
    for step in fact["history"]:
        if order[step["from"]] <= order[version] <= order[step["to"]]:
            return step["value"]
    return None


def q(value: Value) -> str:
    """A TOML value (strings JSON-quoted: TOML basic strings take the same escapes)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(q(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {q(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot render {value!r} as TOML")


def _key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() and key.isascii() else json.dumps(key)


def render_facts(engine: str, command: str, releases: Sequence[Release], note: str) -> str:
    lines = [f"# Generated by `{command}` from the released packages: do not edit (matrices/SCHEMA.md §2.3'').",
             "", "[facts]", f"engine = {q(engine)}", f"generated_by = {q(command)}",
             f"releases = {q([r.version for r in releases])}", f"note = {q(note)}", "", "[facts.read]"]
    for r in releases:
        lines.append(f"{q(r.version)} = {{ file = {q(r.file)}, sha256 = {q(r.sha256)}, "
                     f"sources_sha256 = {q(r.sources_sha256)} }}")
    for fact in histories(releases):
        lines += ["", "[[fact]]", f"kind = {q(fact['kind'])}", f"key = {q(fact['key'])}", "history = ["]
        for step in fact["history"]:
            lines.append(f"  {{ from = {q(step['from'])}, to = {q(step['to'])}, file = {q(step['file'])}, "
                         f"value = {q(step['value'])} }},")
        lines.append("]")
    return "\n".join(lines) + "\n"


def render_rules(engine: str, command: str, releases: Sequence[str], facts_path: str,
                 sources: dict[str, dict[str, str]], rules: Sequence[dict[str, Any]]) -> str:
    """The generated rules file (matrices/SCHEMA.md §2.3''), keys in a fixed order."""
    lines = [f"# Generated by `{command}` from {facts_path}: do not edit (matrices/SCHEMA.md §2.3'').", "",
             "[generated]", f"engine = {q(engine)}", f"generated_by = {q(command)}", f"releases = {q(list(releases))}",
             f"facts = {q(facts_path)}", "", "[sources]"]
    lines += [f"{name} = {q(spec)}" for name, spec in sources.items()]
    order = ("id", "verified", "versions", "gate", "methods", "match", "hardware", "backend", "status", "kernel",
             "requires", "reasons", "warnings", "sources", "priority")
    for rule in rules:
        lines += ["", "[[rule]]"] + [f"{k} = {q(rule[k])}" for k in order if k in rule]
    return "\n".join(lines) + "\n"


def load_facts(text: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the [facts] table, the facts) of a checked-in facts file."""
    data = tomllib.loads(text)
    return data["facts"], data.get("fact", [])


def releases_from_file(text: str) -> list[Release]:
    """The per-release facts a checked-in facts file holds (the inverse of ``render_facts``)."""
    head, facts = load_facts(text)
    out = []
    order = {v: i for i, v in enumerate(head["releases"])}
    for version in head["releases"]:
        read = head["read"][version]
        got = Facts()
        for fact in facts:
            for step in fact["history"]:
                if order[step["from"]] <= order[version] <= order[step["to"]]:
                    got.values[(fact["kind"], fact["key"])] = (step["value"], step["file"])
        out.append(Release(version, read["file"], read["sha256"], read["sources_sha256"], got))
    return out


# --------------------------------------------------------------------------------------------------------------
# the command line every extractor shares


@dataclass
class Extractor:
    engine: str
    package: str
    versions: Sequence[str]
    #: one release's facts from its source tree
    extract: Callable[[Tree], Facts]
    #: (sources, rules) derived from the facts of every release read
    derive: Callable[[Sequence[Release]], tuple[dict[str, dict[str, str]], list[dict[str, Any]]]]
    note: str

    @property
    def command(self) -> str:
        return f"python matrices/tools/extract_{self.package}.py"

    def paths(self, out_dir: Path) -> tuple[Path, Path]:
        return out_dir / f"{self.engine}.facts.toml", out_dir / f"{self.engine}.toml"

    def render(self, releases: Sequence[Release]) -> tuple[str, str]:
        sources, rules = self.derive(releases)
        facts_name = f"generated/{self.engine}.facts.toml"
        return (render_facts(self.engine, self.command, releases, self.note),
                render_rules(self.engine, self.command, [r.version for r in releases], facts_name, sources, rules))

    def read_release(self, version: str, dest: Path) -> Release:
        tree_dir = release_dir(self.package, version, dest)
        info = manifest(tree_dir)
        tree = Tree(tree_dir)
        facts = self.extract(tree)
        return Release(version, str(info["file"]), str(info["sha256"]), tree.sources_sha256(), facts)


def main(extractor: Extractor, argv: Iterable[str] | None = None) -> int:
    """``extract_X.py`` (rewrite the files from the releases under --releases), ``--check`` (offline: both files are
    what the facts file renders and derives, byte for byte; with --releases also what the releases give)."""
    parser = argparse.ArgumentParser(description=f"Extract {extractor.engine}'s code facts from its releases.")
    parser.add_argument("--check", action="store_true", help="verify the checked-in files instead of writing them")
    parser.add_argument("--releases", type=Path, default=None,
                        help=f"fetched releases (matrices/tools/releases.py; default for writing: {DEFAULT_DEST})")
    parser.add_argument("--out", type=Path, default=REPO / "matrices" / "generated")
    parser.add_argument("--changes", nargs="*", metavar="KIND",
                        help="print, per release read, the facts (of these kinds) that changed since the previous one")
    args = parser.parse_args(list(argv) if argv is not None else None)
    facts_path, rules_path = extractor.paths(args.out)
    if args.changes is not None:
        print_changes(releases_from_file(facts_path.read_text()), set(args.changes))
        return 0
    if args.check:
        return _check(extractor, facts_path, rules_path, args.releases)
    dest = args.releases or DEFAULT_DEST
    releases = [extractor.read_release(v, dest) for v in extractor.versions]
    facts_text, rules_text = extractor.render(releases)
    args.out.mkdir(parents=True, exist_ok=True)
    facts_path.write_text(facts_text)
    rules_path.write_text(rules_text)
    print(f"{facts_path} and {rules_path}: {len(releases)} releases of {extractor.engine}")
    return 0


def print_changes(releases: Sequence[Release], kinds: set[str]) -> None:
    """What a reader re-reading a rule at another release needs: per release, the facts that appeared, changed or
    went away since the release read before it."""
    for before, after in itertools.pairwise(releases):
        keys = sorted(k for k in set(before.facts.values) | set(after.facts.values) if not kinds or k[0] in kinds)
        changed = [k for k in keys if before.facts.values.get(k, (None,))[0] != after.facts.values.get(k, (None,))[0]]
        if not changed:
            continue
        print(f"== {before.version} -> {after.version}")
        for kind, key in changed:
            old = before.facts.values.get((kind, key), (None,))[0]
            new = after.facts.values.get((kind, key), (None,))[0]
            if isinstance(old, list) and isinstance(new, list):
                gone = [x for x in old if x not in new]
                added = [x for x in new if x not in old]
                print(f"  {kind} {key}: -{gone} +{added}" if gone or added else f"  {kind} {key}: reordered {new}")
            else:
                print(f"  {kind} {key}: {old!r} -> {new!r}")


def _check(extractor: Extractor, facts_path: Path, rules_path: Path, releases_dir: Path | None) -> int:
    problems = []
    facts_text = facts_path.read_text()
    releases = releases_from_file(facts_text)
    if [r.version for r in releases] != list(extractor.versions):
        problems.append(f"{facts_path.name}: releases {[r.version for r in releases]} are not the extractor's "
                        f"{list(extractor.versions)}")
    facts_again, rules_again = extractor.render(releases)
    if facts_again != facts_text:
        problems.append(f"{facts_path.name} is not what its own facts render (edited by hand?)")
    if rules_again != rules_path.read_text():
        problems.append(f"{rules_path.name} is not what {facts_path.name} derives: re-run the extractor")
    for release in releases:
        if len(release.sha256) != 64 or len(release.sources_sha256) != 64:
            problems.append(f"{release.version}: malformed provenance hashes")
    if releases_dir is not None:
        for release in releases:
            if not (release_dir(extractor.package, release.version, releases_dir) / "RELEASE.json").is_file():
                problems.append(f"{release.version}: not fetched under {releases_dir} (matrices/tools/releases.py)")
                continue
            again = extractor.read_release(release.version, releases_dir)
            if (again.sha256, again.sources_sha256) != (release.sha256, release.sources_sha256):
                problems.append(f"{release.version}: the fetched wheel or the files read differ from the recorded "
                                "hashes")
            if again.facts.values != release.facts.values:
                changed = sorted(set(again.facts.values) ^ set(release.facts.values)
                                 | {k for k in again.facts.values if again.facts.values[k]
                                    != release.facts.values.get(k)})
                problems.append(f"{release.version}: re-extraction differs in {changed[:5]}")
    for problem in problems:
        print(f"FAIL {problem}")
    checked = "re-extracted from the releases and " if releases_dir is not None else ""
    print(f"{extractor.engine}: {len(releases)} releases, {checked}"
          f"{'checked' if not problems else f'{len(problems)} problems'}")
    return 1 if problems else 0
