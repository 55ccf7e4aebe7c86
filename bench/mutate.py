"""Mutation testing of qcheck's core, one module group at a time (on demand, never in CI; docs/testing.md).

    python bench/mutate.py run eval/stats eval/gate      # mutate, run the covering tests, summarise
    python bench/mutate.py list readers                  # the mutants, without running them
    python bench/mutate.py plant bench/mutants_fresh.toml      # hand-made mutants (file, old text, new text)

How it works (small, and built for two shared cores):
- **Mutants** come from the AST of one module: a comparison at its boundary or negated (``<`` <-> ``<=``,
  ``==`` <-> ``!=``, ``in`` <-> ``not in``, ``is`` <-> ``is not``), an arithmetic or bitwise operator swapped
  (``+`` <-> ``-``, ``*`` <-> ``/``, ``//`` -> ``/``, ``<<`` <-> ``>>`` ...), ``and`` <-> ``or``, a ``not`` or
  unary minus dropped, a bare condition negated, a number off by one (``n`` -> ``n + 1``), ``True`` <-> ``False``,
  ``min`` <-> ``max``, ``any`` <-> ``all``, ``break`` <-> ``continue``. Messages (f-strings, ``raise`` arguments),
  annotations, decorators and lines marked ``pragma: no mutate`` are left alone.
- **Tests** are chosen per mutant by line coverage: one traced run of the suite records, for every test, the
  lines of the core modules it executes (cached per test file under bench/_work/mutation/, re-traced only when the
  test file, tests/support/ or a traced module it touched changes). A mutant runs only the tests that execute its
  line, fastest first, stopping at the first failure.
- **Speed**: pytest collects once; every mutant runs in a forked child that patches the mutated function's code
  object in place (module and class constants are patched by value), so a mutant costs a fork and its tests, not
  an interpreter start and an import of torch. A mutant whose tests outrun ``10 s + 2 x`` their traced time is
  re-timed against the unmutated code before it counts as a timeout (a timeout counts as killed).
- **Equivalent mutants** are listed with a one-line reason in bench/mutation_equivalents.toml (matched by file,
  source line and mutation); a survivor not listed there is unexplained and makes the exit code 1.

Tests that run qcheck in a subprocess (the CLI through ``qcheck(...)``) do not see a mutant (it lives in the
forked interpreter) and are not traced either, so they never select themselves; a line only they execute shows as
``no test``.
"""

from __future__ import annotations
import __future__

import argparse
import ast
import copy
import functools
import hashlib
import json
import math
import operator
import os
import signal
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench" / "_work" / "mutation"
EQUIVALENTS = ROOT / "bench" / "mutation_equivalents.toml"

#: module group -> (its files, the test files that exercise it: those run under the tracer, and from them the
#: tests that execute a mutated line); paths relative to the repository root
GROUPS: dict[str, tuple[list[str], list[str]]] = {
    "readers": (["qcheck/readers/*.py"],
                ["tests/test_gguf_*.py", "tests/test_safetensors_*.py", "tests/test_directory_reader.py",
                 "tests/test_pickle_lfs.py", "tests/test_header_scan.py", "tests/test_hostile_checklist.py",
                 "tests/test_tensor_map.py", "tests/test_table_rows.py", "tests/test_inspect_cli.py",
                 "tests/test_hub_remote.py", "tests/test_typed_fuzz.py", "tests/test_targets.py",
                 "tests/test_hub_all.py", "tests/test_hub_target.py"]),
    "classify": (["qcheck/classify/*.py"],
                 ["tests/test_classify_*.py", "tests/test_formats_registry.py", "tests/test_tensor_table.py",
                  "tests/test_tensor_map.py", "tests/test_inspect_cli.py", "tests/test_packing_formats.py",
                  "tests/test_kv_scales.py", "tests/test_adapters.py", "tests/test_table_rows.py",
                  "tests/test_gguf_meta.py"]),
    "matrix": (["qcheck/matrix/*.py"],
               ["tests/test_matrix_*.py", "tests/test_rule_boundaries.py", "tests/test_dimensions.py",
                "tests/test_kv_pairs.py", "tests/test_architectures.py", "tests/test_known_issues.py",
                "tests/test_attention_backend.py", "tests/test_check_cli.py", "tests/test_suggestions.py",
                "tests/test_newest_releases.py", "tests/test_gpu_detect.py", "tests/test_validate.py"]),
    "memory": (["qcheck/memory/*.py"],
               ["tests/test_memory*.py", "tests/test_plan.py", "tests/test_speed.py", "tests/test_one_answer.py",
                "tests/test_capacity.py", "tests/test_startup.py"]),
    "eval/metrics": (["qcheck/eval/metrics.py"],
                     ["tests/test_eval_metrics.py", "tests/test_eval_positions.py", "tests/test_eval_noise_floor.py",
                      "tests/test_eval_plausibility.py", "tests/test_eval_generation.py", "tests/test_eval_run.py"]),
    "eval/stats": (["qcheck/eval/stats.py"],
                   ["tests/test_eval_stats.py", "tests/test_eval_metrics.py", "tests/test_eval_gate.py",
                    "tests/test_eval_generation.py"]),
    "eval/gate": (["qcheck/eval/gate.py"],
                  ["tests/test_eval_gate.py", "tests/test_eval_metrics.py", "tests/test_policy.py",
                   "tests/test_eval_generation.py", "tests/test_eval_kv_cache.py", "tests/test_gate_quality.py"]),
    "policy": (["qcheck/policy.py"],
               ["tests/test_policy*.py", "tests/test_gate*.py", "tests/test_redteam.py", "tests/test_targets.py",
                "tests/test_validate.py", "tests/test_hostile_policies.py", "tests/test_deploy_manifests.py",
                "tests/test_redteam_deploy.py", "tests/test_one_answer.py", "tests/test_startup.py",
                "tests/test_memory_knobs.py", "tests/test_platform_engineer.py"]),
    "deploy": (["qcheck/deploy/*.py"],
               ["tests/test_deploy_*.py", "tests/test_argv_*.py", "tests/test_gate.py", "tests/test_gate_action.py", "tests/test_redteam.py",
                "tests/test_examples_gate.py", "tests/test_redteam_deploy.py", "tests/test_one_answer.py",
                "tests/test_startup.py", "tests/test_platform_engineer.py"]),
}
#: test files never traced: they run tools in subprocesses (ruff, mypy, a wheel build), nothing in-process
UNTRACED_TESTS = ("tests/test_typing.py", "tests/test_wheel.py", "tests/test_precommit.py")


def _glob(patterns: list[str]) -> list[str]:
    out: list[str] = []
    for pattern in patterns:
        out += [m for m in sorted(str(p.relative_to(ROOT)) for p in ROOT.glob(pattern)) if m not in out]
    return out


def group_tests(names: list[str]) -> list[str]:
    """The test files of the named groups (a file path given instead of a group: every test file)."""
    patterns: list[str] = []
    for name in names:
        patterns += GROUPS[name.strip("/")][1] if name.strip("/") in GROUPS else ["tests/test_*.py"]
    return [t for t in _glob(patterns) if t not in UNTRACED_TESTS]


def group_files(names: list[str]) -> list[str]:
    out: list[str] = []
    for name in names:
        patterns = GROUPS[name.strip("/")][0] if name.strip("/") in GROUPS else [name]
        for pattern in patterns:
            matches = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob(pattern))
            if not matches:
                raise SystemExit(f"no module matches {name!r}; groups: {', '.join(GROUPS)} (or a path under qcheck/)")
            out += [m for m in matches if m not in out]
    return out




# =============================================================================================== mutants
_COMPARE = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
            ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_BINOP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Div,
          ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult, ast.LShift: ast.RShift, ast.RShift: ast.LShift,
          ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd, ast.BitXor: ast.BitOr}
_SWAP_CALLS = {"min": "max", "max": "min", "any": "all", "all": "any"}
_SKIP_FIELDS = {"annotation", "returns", "decorator_list", "type_comment", "type_params"}


@dataclass
class Site:
    """One mutant: where it is, what it changes, and how to apply it to a fresh tree of the same source."""

    file: str
    index: int
    line: int
    end_line: int
    col: int
    before: str
    after: str
    #: ``function`` (inside a function body: patched by code object), ``defaults`` or ``module``
    scope: str
    #: the lines whose coverage selects the tests (the mutated node's lines, or uses of a mutated constant)
    lines: tuple[int, ...] = ()
    #: module-level names the mutated statement binds (a table a test may read directly)
    names: tuple[str, ...] = ()
    apply: Callable[[], None] = field(default=lambda: None, repr=False)

    @property
    def mutation(self) -> str:
        return f"{self.before} -> {self.after}"

    #: 1 for the first mutant of the file with this source line and mutation text, 2 for the next ... (a line may
    #: hold the same comparison twice)
    nth: int = 1

    def key(self, source_lines: list[str]) -> tuple[str, str, str, int]:
        return self.file, source_lines[self.line - 1].strip(), self.mutation, self.nth


def _short(node: ast.AST) -> str:
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= 70 else text[:67] + "..."


def _no_mutate_lines(source: str) -> set[int]:
    return {n for n, line in enumerate(source.splitlines(), 1) if "pragma: no mutate" in line}


def _is_string(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)))


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


class _Walker:
    """Enumerates mutation sites in a fixed order (so index i names the same mutant on every parse)."""

    def __init__(self, file: str, tree: ast.Module, skip_lines: set[int]) -> None:
        self.file, self.tree, self.skip_lines = file, tree, skip_lines
        self.sites: list[Site] = []

    def run(self) -> list[Site]:
        for stmt in self.tree.body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # docstring
            self._visit(stmt, scope="module", top=stmt)
        return self.sites

    # -- traversal
    def _children(self, node: ast.AST) -> Iterator[tuple[str, Any]]:
        for name, value in ast.iter_fields(node):
            if name in _SKIP_FIELDS:
                continue
            yield name, value

    def _visit(self, node: ast.AST, scope: str, top: ast.stmt) -> None:
        if isinstance(node, (ast.JoinedStr, ast.Raise, ast.Import, ast.ImportFrom)) or _is_type_checking(node):
            return
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in ("__all__", "__slots__")
                                                 for t in node.targets):
            return
        if isinstance(node, ast.AnnAssign) and node.value is None:
            return
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            return  # docstring of a function or class
        self._sites_of(node, scope, top)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for default in [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]:
                self._visit(default, "defaults" if scope != "function" else "function", top)
            for stmt in (node.body if isinstance(node.body, list) else [node.body]):
                self._visit(stmt, "function", top)
            return
        for name, value in self._children(node):
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if isinstance(item, ast.AST):
                        self._replaceable(node, name, i, item, scope, top)
                        self._visit(item, scope, top)
            elif isinstance(value, ast.AST):
                self._replaceable(node, name, None, value, scope, top)
                self._visit(value, scope, top)

    # -- sites that edit a node in place
    def _add(self, node: ast.AST, before: str, after: str, scope: str, apply: Callable[[], None],
             line_node: ast.AST | None = None) -> None:
        anchor = line_node or node
        line = getattr(anchor, "lineno", 0)
        if line in self.skip_lines:
            return
        self.sites.append(Site(self.file, len(self.sites), line, getattr(anchor, "end_lineno", line) or line,
                               getattr(anchor, "col_offset", 0), before, after, scope, apply=apply))

    def _sites_of(self, node: ast.AST, scope: str, top: ast.stmt) -> None:
        if isinstance(node, ast.Compare):
            for j, op in enumerate(node.ops):
                new = _COMPARE.get(type(op))
                if new is None:
                    continue
                before = _short(node)

                def swap(node: ast.Compare = node, j: int = j, new: type = new) -> None:
                    node.ops[j] = new()

                probe = copy.deepcopy(node)
                probe.ops[j] = new()
                self._add(node, before, _short(probe), scope, swap)
        elif isinstance(node, (ast.BinOp, ast.AugAssign)):
            new = _BINOP.get(type(node.op))
            left = node.left if isinstance(node, ast.BinOp) else node.target
            right = node.right if isinstance(node, ast.BinOp) else node.value
            if new is None or _is_string(left) or _is_string(right):
                return
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and _is_string(node.left):
                return

            def swap_op(node: ast.BinOp | ast.AugAssign = node, new: type = new) -> None:
                node.op = new()

            probe = copy.deepcopy(node)
            probe.op = new()
            self._add(node, _short(node), _short(probe), scope, swap_op)
        elif isinstance(node, ast.BoolOp):
            new_bool = ast.Or if isinstance(node.op, ast.And) else ast.And

            def swap_bool(node: ast.BoolOp = node, new: type = new_bool) -> None:
                node.op = new()

            probe = copy.deepcopy(node)
            probe.op = new_bool()
            self._add(node, _short(node), _short(probe), scope, swap_bool)
        elif isinstance(node, ast.Constant) and not isinstance(node.value, (str, bytes)) and node.value is not None:
            value = node.value
            if isinstance(value, bool):
                new_value: Any = not value
            elif isinstance(value, int):
                new_value = value + 1
            elif isinstance(value, float):
                new_value = value + 1.0
            else:
                return

            def set_value(node: ast.Constant = node, new_value: Any = new_value) -> None:
                node.value = new_value

            self._add(node, repr(value), repr(new_value), scope, set_value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _SWAP_CALLS:
            other = _SWAP_CALLS[node.func.id]

            def swap_call(node: ast.Call = node, other: str = other) -> None:
                node.func.id = other  # type: ignore[attr-defined]

            self._add(node, f"{node.func.id}(...)", f"{other}(...)", scope, swap_call)

    def _replaceable(self, parent: ast.AST, name: str, index: int | None, node: ast.AST, scope: str,
                     top: ast.stmt) -> None:
        """Sites that replace a node in its parent: drop ``not``/unary minus, negate a bare condition,
        ``break`` <-> ``continue``."""
        def put(new: ast.AST, parent: ast.AST = parent, name: str = name, index: int | None = index) -> None:
            if index is None:
                setattr(parent, name, new)
            else:
                getattr(parent, name)[index] = new

        if isinstance(node, ast.UnaryOp) and (isinstance(node.op, ast.Not) or (
                isinstance(node.op, ast.USub) and not isinstance(node.operand, ast.Constant))):
            self._add(node, _short(node), _short(node.operand), scope, lambda n=node, p=put: p(n.operand))
        elif isinstance(node, (ast.Break, ast.Continue)):
            other = ast.Continue() if isinstance(node, ast.Break) else ast.Break()
            ast.copy_location(other, node)
            self._add(node, _short(node), _short(other), scope, lambda o=other, p=put: p(o))
        elif (name in ("test", "ifs") and isinstance(parent, (ast.If, ast.While, ast.IfExp, ast.comprehension))
              and not isinstance(node, (ast.Compare, ast.BoolOp, ast.UnaryOp, ast.Constant))):
            negated = ast.copy_location(ast.UnaryOp(op=ast.Not(), operand=node), node)
            self._add(node, _short(node), _short(negated), scope, lambda n=negated, p=put: p(n))


#: the sources as this run first read them: a file edited while a run goes on does not shift its mutants
_SNAPSHOT: dict[str, str] = {}


def read_source(file: str) -> str:
    if file not in _SNAPSHOT:
        _SNAPSHOT[file] = (ROOT / file).read_text()
    return _SNAPSHOT[file]


def changed_during_run() -> list[str]:
    return [f for f, text in _SNAPSHOT.items() if (ROOT / f).read_text() != text]


def module_sites(file: str) -> tuple[str, list[Site]]:
    """The mutants of one file, in a fixed order (``mutated_tree`` applies one to a fresh tree)."""
    source = read_source(file)
    tree = ast.parse(source, file)
    sites = _Walker(file, tree, _no_mutate_lines(source)).run()
    _fill_lines(tree, sites)
    lines = source.splitlines()
    seen: dict[tuple[str, str], int] = {}
    for site in sites:
        text = (lines[site.line - 1].strip(), site.mutation)
        seen[text] = site.nth = seen.get(text, 0) + 1
    return source, sites


def mutated_tree(file: str, index: int) -> tuple[ast.Module, Site]:
    """A fresh tree of ``file`` with mutant ``index`` applied."""
    source = read_source(file)
    tree = ast.parse(source, file)
    sites = _Walker(file, tree, _no_mutate_lines(source)).run()
    sites[index].apply()
    ast.fix_missing_locations(tree)
    return tree, sites[index]


def _fill_lines(tree: ast.Module, sites: list[Site]) -> None:
    """Which lines select a mutant's tests: its own (in a function), or the lines that use the module-level names
    its statement binds (a constant is read where it is used, not where it is written)."""
    tops = [(s.lineno, s.end_lineno or s.lineno, s) for s in tree.body]
    funcs = [(n.lineno, n.end_lineno or n.lineno) for n in ast.walk(tree)
             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    loads: dict[str, set[int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            loads.setdefault(node.id, set()).add(node.lineno)
        elif isinstance(node, ast.Attribute):  # Class.CONSTANT / self.CONSTANT
            loads.setdefault(node.attr, set()).add(node.lineno)
    for site in sites:
        if site.scope == "function":
            site.lines = tuple(range(site.line, site.end_line + 1))
            continue
        if site.scope == "defaults":  # a default is read by the function's body
            span = max((f for f in funcs if f[0] <= site.line <= f[1]), key=lambda f: f[0], default=None)
            site.lines = tuple(range(span[0] + 1, span[1] + 1)) if span else ()
            continue
        top = next((s for a, b, s in tops if a <= site.line <= b), None)
        names = _bound_names(top) if top is not None else set()
        site.names = tuple(sorted(names))
        used = set().union(*(loads.get(n, set()) for n in names)) if names else set()
        # only uses inside functions are traced (module-level code ran at import); none: every test of the file
        site.lines = tuple(sorted(n for n in used if any(a < n <= b for a, b in funcs)))


def _bound_names(stmt: ast.stmt) -> set[str]:
    names: set[str] = set()
    if isinstance(stmt, ast.ClassDef):
        names.add(stmt.name)
        for sub in stmt.body:
            names |= _bound_names(sub)
        return names
    targets: list[ast.AST] = []
    if isinstance(stmt, ast.Assign):
        targets = list(stmt.targets)
    elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        targets = [stmt.target]
    elif isinstance(stmt, ast.For):
        targets = [stmt.target]
        for sub in stmt.body:
            names |= _bound_names(sub)
    for target in targets:
        names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            names.add(target.value.id)
    return names


# =============================================================================================== patching
def _future_flags(tree: ast.Module) -> int:
    flags = 0
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
            for alias in stmt.names:
                flags |= getattr(__future__, alias.name).compiler_flag
    return flags


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _unwrap(obj: Any) -> Iterator[types.FunctionType]:
    """The plain functions behind a module or class attribute (methods, properties, caches, wrappers)."""
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        for part in (obj.fget, obj.fset, obj.fdel):
            if part is not None:
                yield from _unwrap(part)
        return
    if isinstance(obj, functools.cached_property):
        obj = obj.func
    seen = 0
    while hasattr(obj, "__wrapped__") and seen < 5:
        if isinstance(obj, types.FunctionType):
            yield obj
        obj = obj.__wrapped__
        seen += 1
    if isinstance(obj, types.FunctionType):
        yield obj


def _functions(module: types.ModuleType) -> Iterator[tuple[str, types.FunctionType]]:
    """(attribute path, function) for every function the module defines, methods of its classes included."""
    def walk(namespace: dict[str, Any], prefix: str, depth: int) -> Iterator[tuple[str, types.FunctionType]]:
        for name, obj in list(namespace.items()):
            if isinstance(obj, type) and obj.__module__ == module.__name__ and depth < 3:
                yield from walk(dict(vars(obj)), f"{prefix}{name}.", depth + 1)
                continue
            for fn in _unwrap(obj):
                if fn.__module__ == module.__name__:
                    yield f"{prefix}{name}", fn

    yield from walk(vars(module), "", 0)


#: callables compared by what they select (``itemgetter(0)`` vs ``itemgetter(1)``), so their mutants apply
_GETTERS = (operator.itemgetter, operator.attrgetter)


def _plain(value: Any, module_name: str) -> bool:
    """A value compared by content (so a re-executed module's copy can be told apart from the original)."""
    if isinstance(value, _GETTERS):
        return True
    if isinstance(value, (types.FunctionType, types.ModuleType, type)) or callable(value):
        return False
    if type(value).__module__ == module_name:
        return False  # an instance of the module's own class: the new copy is of a new class
    if isinstance(value, (int, float, str, bytes, bool, tuple, list, dict, set, frozenset)) or value is None:
        return True
    return type(value).__eq__ is not object.__eq__


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down: ``{"F16": 2}`` and ``{"F16": 2.0}`` differ (a ``//`` -> ``/``
    mutant of a table), as do ``itemgetter(0)`` and ``itemgetter(1)``."""
    try:
        if type(a) is not type(b):
            return False
        if isinstance(a, _GETTERS):
            return repr(a) == repr(b)
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
        if isinstance(a, (list, tuple)):
            return len(a) == len(b) and all(map(_same, a, b))
        return bool(a == b)
    except Exception:
        return False


def _rebind(old: Any, new: Any, name: str) -> int:
    """Put ``new`` where ``old`` was: in place for a mutable container, else in every module binding it."""
    if isinstance(old, dict) and isinstance(new, dict):
        old.clear()
        old.update(new)
        return 1
    if isinstance(old, list) and isinstance(new, list):
        old[:] = new
        return 1
    if isinstance(old, set) and isinstance(new, set):
        old.clear()
        old |= new
        return 1
    scalar = isinstance(old, (int, float, str, bytes, bool)) or old is None
    count = 0
    for mod in list(sys.modules.values()):
        namespace = getattr(mod, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for key, value in list(namespace.items()):
            if value is old and (key == name or not scalar):
                namespace[key] = new
                count += 1
    return count


def patch_functions(module: types.ModuleType, new_codes: dict[str, types.CodeType]) -> int:
    """Swap in the new code object of every function whose code changed (found by qualified name)."""
    patched = 0
    for _, fn in _functions(module):
        new = new_codes.get(fn.__code__.co_qualname)
        if new is not None and new != fn.__code__:
            fn.__code__ = new
            patched += 1
    return patched


def patch_from_namespace(module: types.ModuleType, ns: dict[str, Any]) -> int:
    """Make ``module`` behave as the re-executed namespace ``ns``: function code and defaults, module and class
    constants. Returns how many things changed (0: the mutant changed nothing that runs)."""
    patched = 0
    new_funcs: dict[str, types.FunctionType] = {}
    fake = types.ModuleType(module.__name__)
    fake.__dict__.update(ns)
    for path, fn in _functions(fake):
        new_funcs[path] = fn
    for path, fn in _functions(module):
        new = new_funcs.get(path)
        if new is None:
            continue
        if new.__code__ != fn.__code__:
            try:
                fn.__code__ = new.__code__
            except ValueError:  # a different closure: cannot be patched in place
                continue
            patched += 1
        if not _same(new.__defaults__, fn.__defaults__):
            fn.__defaults__ = new.__defaults__
            patched += 1
        if not _same(new.__kwdefaults__, fn.__kwdefaults__):
            fn.__kwdefaults__ = new.__kwdefaults__
            patched += 1
    for name, value in ns.items():
        old = module.__dict__.get(name, value)
        if name.startswith("__") or not _plain(old, module.__name__) or _same(old, value):
            continue
        patched += _rebind(old, value, name)
    for name, cls in list(vars(module).items()):
        new_cls = ns.get(name)
        if not (isinstance(cls, type) and isinstance(new_cls, type) and cls.__module__ == module.__name__):
            continue
        for attr, value in vars(new_cls).items():
            old = vars(cls).get(attr, value)
            if attr.startswith("__") or not _plain(old, module.__name__) or _same(old, value):
                continue
            setattr(cls, attr, value)
            patched += 1
    return patched


def module_name(file: str) -> str:
    return file[:-3].replace("/", ".").removesuffix(".__init__")


def apply_tree(file: str, tree: ast.Module, scope: str, top_line: int) -> int:
    """Apply a mutated tree of ``file`` to the imported module; returns the number of patched objects."""
    name = module_name(file)
    module = sys.modules.get(name)
    if module is None:
        module = __import__(name, fromlist=["_"])
    path = str(ROOT / file)
    flags = _future_flags(tree)
    if scope == "function":  # compile only the top-level statement that holds it: nothing is executed
        top = next(s for s in tree.body if s.lineno <= top_line <= (s.end_lineno or s.lineno))
        code = compile(ast.Module(body=[top], type_ignores=[]), path, "exec", flags=flags, dont_inherit=True)
        return patch_functions(module, {c.co_qualname: c for c in _codes(code)})
    code = compile(tree, path, "exec", flags=flags, dont_inherit=True)
    ns: dict[str, Any] = {"__name__": name, "__file__": path, "__package__": name.rpartition(".")[0],
                          "__builtins__": __builtins__}
    exec(code, ns)
    return patch_from_namespace(module, ns)


def clear_caches() -> None:
    """functools caches of qcheck's modules may hold results of the unmutated code (computed at collection)."""
    for mod_name, mod in list(sys.modules.items()):
        if not mod_name.startswith("qcheck"):
            continue
        for obj in list(vars(mod).values()):
            targets = [obj] + (list(vars(obj).values()) if isinstance(obj, type) else [])
            for target in targets:
                clear = getattr(target, "cache_clear", None)
                if callable(clear):
                    try:
                        clear()
                    except Exception:
                        pass


# =============================================================================================== coverage
def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


@functools.cache
def support_hash() -> str:
    files = [*sorted((ROOT / "tests" / "support").glob("*.py")), ROOT / "tests" / "conftest.py"]
    return _sha(b"".join(p.read_bytes() for p in files))


_HASHES: dict[str, str] = {}


def file_hash(rel: str) -> str:
    """A file's hash as this run first saw it (a test edited while the run goes on keeps its first hash)."""
    if rel not in _HASHES:
        _HASHES[rel] = _sha(read_source(rel).encode() if rel.startswith("qcheck/") else (ROOT / rel).read_bytes())
    return _HASHES[rel]


class CoverageCache:
    """Per test file: {test node id: {core file: [lines]}}, the core files each test file touched, and hashes."""

    def __init__(self) -> None:
        self.dir = WORK / "coverage"
        self.dir.mkdir(parents=True, exist_ok=True)

    def _path(self, test_file: str) -> Path:
        return self.dir / (test_file.replace("/", "__") + ".json")

    def load(self, test_file: str) -> dict[str, Any] | None:
        try:
            return json.loads(self._path(test_file).read_text())
        except (OSError, ValueError):
            return None

    def save(self, test_file: str, entry: dict[str, Any]) -> None:
        self._path(test_file).write_text(json.dumps(entry))

    def stale(self, test_file: str, targets: list[str], support: str) -> bool:
        entry = self.load(test_file)
        if entry is None or entry["test_hash"] != file_hash(test_file) or entry["support_hash"] != support:
            return True
        for target in targets:
            if target in entry["touched"] and entry["traced"].get(target) != file_hash(target):
                return True
        return False


def _merged(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """A new trace of a test file keeps an older trace's lines of the modules it did not trace this time (the same
    test file and support code: other groups' runs stay valid)."""
    if not old or (old["test_hash"], old["support_hash"]) != (new["test_hash"], new["support_hash"]):
        return new
    keep = {f: h for f, h in old["traced"].items() if f not in new["traced"]}
    new["traced"] = {**keep, **new["traced"]}
    new["touched"] = sorted(set(new["touched"]) | set(old["touched"]))
    for nid, item in new["items"].items():
        before = old["items"].get(nid, {}).get("lines", {})
        item["lines"] = {**{f: v for f, v in before.items() if f in keep}, **item["lines"]}
    return new


class Tracer:
    """Line coverage of the traced files, per test (sys.settrace: Python 3.11 has no sys.monitoring)."""

    def __init__(self, files: list[str]) -> None:
        self.files = {str(ROOT / f): f for f in files}
        self.prefix = str(ROOT / "qcheck") + os.sep
        self.hits: dict[str, set[int]] = {}
        self.touched: set[str] = set()

    def _global(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        name = frame.f_code.co_filename
        rel = self.files.get(name)
        if rel is not None:
            self.touched.add(rel)
            return self._local
        if name.startswith(self.prefix):
            self.touched.add(name[len(str(ROOT)) + 1:])
        return None

    def _local(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            rel = self.files[frame.f_code.co_filename]
            self.hits.setdefault(rel, set()).add(frame.f_lineno)
        return self._local

    def start(self) -> None:
        import threading

        sys.settrace(self._global)
        threading.settrace(self._global)

    def stop(self) -> None:
        import threading

        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]

    def take(self) -> dict[str, list[int]]:
        out = {f: sorted(lines) for f, lines in self.hits.items()}
        self.hits = {}
        return out


# =============================================================================================== children
@dataclass
class ChildResult:
    status: str  # killed | survived | timeout | unapplied | error
    failed: str | None = None
    ran: int = 0
    seconds: float = 0.0
    detail: str = ""


def _run_child(body: Callable[[], dict[str, Any]], timeout: float, log: Path | None = None) -> tuple[str, dict]:
    """Fork; the child runs ``body`` (its own process group, output to ``log`` or /dev/null) and reports JSON."""
    fd, result_path = tempfile.mkstemp(prefix="mutant-", suffix=".json", dir=WORK)
    os.close(fd)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # child
        code = 3
        try:
            os.setpgid(0, 0)
            out = os.open(str(log) if log else os.devnull, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            os.dup2(out, 1)
            os.dup2(out, 2)
            data = body()
            Path(result_path).write_text(json.dumps(data))
            code = 0
        except BaseException as exc:  # the child reports anything and exits
            try:
                Path(result_path).write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
            except Exception:
                pass
        finally:
            os._exit(code)
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass
    start = time.monotonic()
    state = "done"
    while True:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() - start > timeout:
            state = "timeout"
            break
        time.sleep(0.02)
    try:
        os.killpg(pid, signal.SIGKILL)  # the child and anything its tests started (servers, subprocesses)
    except OSError:
        pass
    if state == "timeout":
        os.waitpid(pid, 0)
    try:
        data = json.loads(Path(result_path).read_text() or "{}")
    except (OSError, ValueError):
        data = {}
    Path(result_path).unlink(missing_ok=True)
    data["seconds"] = time.monotonic() - start
    return state, data


class Session:
    """Drives the pytest session collected once: coverage tracing and mutant runs, each in a forked child."""

    def __init__(self, args: argparse.Namespace, targets: list[str]) -> None:
        self.args = args
        self.targets = targets
        self.items: dict[str, Any] = {}
        self.coverage: dict[str, dict[str, list[int]]] = {}
        self.durations: dict[str, float] = {}
        self.fixture_cost: dict[tuple[str, str], float] = {}
        #: tests whose traced time (with their file's costliest setup) is over --max-test-seconds: never selected
        self.too_slow: set[str] = set()
        self.failing: set[str] = set()
        self.reports: list[Any] = []
        self.control_times: dict[tuple[str, ...], float] = {}

    # -- pytest hooks (this object is passed to pytest.main as a plugin)
    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: Any) -> bool:
        self.items = {item.nodeid: item for item in session.items}
        self.args.body(self)
        return True

    def pytest_runtest_logreport(self, report: Any) -> None:
        self.reports.append(report)

    # -- helpers for the children
    def _fresh_tmp(self, config: Any) -> Path:
        base = Path(tempfile.mkdtemp(prefix="basetemp-", dir=WORK))
        factory = config._tmp_path_factory
        factory._given_basetemp = base
        factory._basetemp = None
        os.environ["QCHECK_CACHE_DIR"] = str(base / "qcheck-cache")
        return base

    def _run_items(self, items: list[Any], stop_on_failure: bool) -> tuple[str | None, list[tuple[str, str, float]]]:
        """Run items in this (child) process; the first failure's node id and per-item outcomes."""
        outcomes: list[tuple[str, str, float]] = []
        first_failed: str | None = None
        for i, item in enumerate(items):
            self.reports = []
            nextitem = items[i + 1] if i + 1 < len(items) else None
            start = time.monotonic()
            item.ihook.pytest_runtest_protocol(item=item, nextitem=nextitem)
            took = time.monotonic() - start
            failed = any(r.failed for r in self.reports)
            outcomes.append((item.nodeid, "failed" if failed else "passed", took))
            if failed and first_failed is None:
                first_failed = item.nodeid
                if stop_on_failure:
                    break
        return first_failed, outcomes

    # -- coverage
    def trace(self, test_files: list[str], files: list[str]) -> None:
        """Trace the given test files' tests (one child) and store their coverage of ``files`` per test file."""
        items = [it for nid, it in self.items.items() if nid.split("::")[0] in test_files]
        if not items:
            return
        support = support_hash()
        say(f"tracing {len(items)} tests of {len(test_files)} test files (coverage of {len(files)} modules; "
            f"again only when a test file, tests/support/ or a module it runs changes)...")
        log = WORK / "trace.log"
        log.write_text("")

        def body() -> dict[str, Any]:
            config = items[0].config
            base = self._fresh_tmp(config)
            tracer = Tracer(files)
            per_item: dict[str, Any] = {}
            touched: dict[str, set[str]] = {}
            for i, item in enumerate(items):
                self.reports = []
                tracer.touched = set()
                start = time.monotonic()
                tracer.start()
                try:
                    item.ihook.pytest_runtest_protocol(item=item, nextitem=items[i + 1] if i + 1 < len(items) else None)
                finally:
                    tracer.stop()
                took = time.monotonic() - start
                failed = any(r.failed for r in self.reports)
                setup = sum(r.duration for r in self.reports if r.when == "setup")
                per_item[item.nodeid] = {"lines": tracer.take(), "seconds": round(took, 4), "failed": failed,
                                         "setup": round(setup, 4)}
                touched.setdefault(item.nodeid.split("::")[0], set()).update(tracer.touched)
                if i % 50 == 0:
                    print(f"traced {i}/{len(items)}", flush=True)
            import shutil

            shutil.rmtree(base, ignore_errors=True)
            return {"items": per_item, "touched": {k: sorted(v) for k, v in touched.items()}}

        state, data = _run_child(body, timeout=6 * 3600, log=log)
        if "items" not in data:
            raise SystemExit(f"the tracing run failed ({state}): {data.get('error')}; see {log}")
        cache = CoverageCache()
        for test_file in test_files:
            entry = {"test_hash": file_hash(test_file), "support_hash": support,
                     "touched": data["touched"].get(test_file, []), "traced": {f: file_hash(f) for f in files},
                     "items": {nid: v for nid, v in data["items"].items() if nid.split("::")[0] == test_file}}
            cache.save(test_file, _merged(cache.load(test_file), entry))

    def load_coverage(self, test_files: list[str]) -> None:
        self._load_coverage(test_files)
        limit = getattr(self.args, "max_test_seconds", math.inf)
        self.too_slow = {nid for nid in self.coverage if self.cost(nid) > limit}

    def _load_coverage(self, test_files: list[str]) -> None:
        cache = CoverageCache()
        for test_file in test_files:
            entry = cache.load(test_file)
            if entry is None:
                continue
            for nid, v in entry["items"].items():
                if nid not in self.items:
                    continue
                # a module- or session-scoped fixture is paid by the first test that uses it, and again in every
                # child that runs a test using it: its cost is the largest setup seen among its tests
                for fixture in self._shared_fixtures(nid):
                    key = (test_file, fixture)
                    self.fixture_cost[key] = max(self.fixture_cost.get(key, 0.0), v.get("setup", v["seconds"]))
                self.durations[nid] = v["seconds"]
                if v["failed"]:
                    self.failing.add(nid)
                else:
                    self.coverage[nid] = v["lines"]

    def select(self, file: str, lines: tuple[int, ...]) -> list[str]:
        wanted = set(lines)
        chosen = [nid for nid, cov in self.coverage.items()
                  if file in cov and (not wanted or wanted.intersection(cov[file])) and nid not in self.too_slow]
        return sorted(chosen, key=lambda nid: (self.cost(nid), nid))

    def _shared_fixtures(self, nid: str) -> list[str]:
        """The fixtures of a test that outlive it (module, class, package or session scope)."""
        info = getattr(self.items[nid], "_fixtureinfo", None)
        defs = getattr(info, "name2fixturedefs", {}) or {}
        return sorted(name for name, fdefs in defs.items() if fdefs and fdefs[-1].scope != "function")

    def readers_of(self, names: tuple[str, ...]) -> list[str]:
        """Passing tests of the test files that name any of ``names`` (``from qcheck... import TABLE``)."""
        import re

        pattern = re.compile(r"\b(?:" + "|".join(map(re.escape, names)) + r")\b")
        files = {n.split("::")[0] for n in self.coverage}
        hits = {f for f in files if pattern.search(self._test_text(f))}
        chosen = [n for n in self.coverage if n.split("::")[0] in hits and n not in self.too_slow]
        return sorted(chosen, key=lambda nid: (self.cost(nid), nid))

    @functools.cache  # noqa: B019 - one Session per run
    def _test_text(self, test_file: str) -> str:
        return (ROOT / test_file).read_text(encoding="utf-8")

    def cost(self, nid: str) -> float:
        """A test's traced time plus the setup of the shared fixtures it uses (each child sets them up again)."""
        file = nid.split("::")[0]
        return self.durations.get(nid, 1.0) + sum(self.fixture_cost.get((file, f), 0.0)
                                                  for f in self._shared_fixtures(nid))

    def budget(self, nodeids: list[str]) -> float:
        """Seconds the tests took under the tracer, each shared fixture's setup counted once."""
        fixtures = {(n.split("::")[0], f) for n in nodeids for f in self._shared_fixtures(n)}
        return sum(self.durations.get(n, 1.0) for n in nodeids) + sum(self.fixture_cost.get(k, 0.0) for k in fixtures)

    # -- mutants
    def run_mutant(self, nodeids: list[str], apply: Callable[[], int], timeout: float) -> ChildResult:
        items = [self.items[n] for n in nodeids]

        def body() -> dict[str, Any]:
            base = self._fresh_tmp(items[0].config)
            patched = apply()
            if not patched:
                return {"unapplied": True}
            clear_caches()
            failed, outcomes = self._run_items(items, stop_on_failure=True)
            import shutil

            shutil.rmtree(base, ignore_errors=True)
            return {"failed": failed, "ran": len(outcomes)}

        state, data = _run_child(body, timeout)
        base_result = ChildResult("error", seconds=data["seconds"], detail=data.get("error", ""))
        if state == "timeout":
            base_result.status = "timeout"
        elif data.get("unapplied"):
            base_result.status = "unapplied"
        elif "ran" in data:
            base_result.status = "killed" if data["failed"] else "survived"
            base_result.failed = data["failed"]
            base_result.ran = data["ran"]
        return base_result

    def control_time(self, nodeids: list[str]) -> float:
        """Seconds the unmutated code takes for these tests in a child (to tell a slow start from a hang)."""
        key = tuple(nodeids)
        if key not in self.control_times:
            result = self.run_mutant(nodeids, lambda: 1, timeout=1800)
            self.control_times[key] = result.seconds if result.status == "survived" else math.inf
        return self.control_times[key]



def say(text: str) -> None:
    print(text, file=sys.__stderr__, flush=True)


# =============================================================================================== equivalents
def load_equivalents() -> dict[tuple[str, str, str, int], str]:
    """(file, source line, mutation, nth) -> the reason the mutant cannot change what qcheck does."""
    if not EQUIVALENTS.exists():
        return {}
    data = tomllib.loads(EQUIVALENTS.read_text())
    return {(e["file"], e["code"].strip(), e["mutation"], e.get("nth", 1)): e["reason"]
            for e in data.get("equivalent", [])}


# =============================================================================================== commands
def needed_test_files(targets: list[str], all_tests: list[str]) -> tuple[list[str], list[str]]:
    """(stale test files to trace, test files whose cached coverage reaches the targets)."""
    cache = CoverageCache()
    support = support_hash()
    for t in all_tests:
        file_hash(t)  # as the run starts: a test edited while it runs is traced again next time
    stale = [t for t in all_tests if cache.stale(t, targets, support)]
    useful = []
    for t in all_tests:
        if t in stale:
            continue
        entry = cache.load(t)
        if entry and any(any(f in v["lines"] for f in targets) for v in entry["items"].values()):
            useful.append(t)
    return stale, useful


def start_pytest(test_files: list[str], session: Session) -> None:
    os.environ.setdefault("HYPOTHESIS_PROFILE", "ci")  # derandomised: a mutant's result is reproducible
    os.chdir(ROOT)
    code = pytest.main(["-q", "-s", "-p", "no:cacheprovider", "--no-header", *test_files], plugins=[session])
    if code not in (0, 5) and not session.items:
        raise SystemExit(f"pytest could not collect the tests (exit {code})")


def _select_for(site: Site, session: Session) -> list[str]:
    chosen = session.select(site.file, site.lines) if site.lines else session.select(site.file, ())
    if site.scope != "function" and site.names:
        # a table is also read by tests that import it and check its rows without running the code that uses it
        chosen += [n for n in session.readers_of(site.names) if n not in chosen]
    return chosen


def run_command(args: argparse.Namespace) -> int:
    targets = group_files(args.modules)
    for file in targets:
        read_source(file)  # the snapshot every mutant and coverage hash of this run uses
    all_tests = _glob(args.tests) if args.tests else group_tests(args.modules)
    stale, useful = needed_test_files(targets, all_tests)
    say(f"{len(targets)} modules; {len(stale)} test files to trace, {len(useful)} with cached coverage")
    equivalents = load_equivalents()
    results: list[dict[str, Any]] = []
    started = time.monotonic()
    name = args.out or "-".join(m.replace("/", "_") for m in args.modules)
    log = WORK / f"{name}.jsonl"
    earlier = _earlier_kills(log) if args.resume else {}
    log.write_text("")

    def body(session: Session) -> None:
        if stale:
            session.trace(stale, targets)
        session.load_coverage(stale + useful)
        say(f"{len(session.coverage)} passing tests traced ({len(session.failing)} failing at baseline, left out); "
            f"tests slower than {args.max_test_seconds:g} s left out of selection: {len(session.too_slow)}")
        for file in targets:
            source, sites = module_sites(file)
            lines = source.splitlines()
            if args.line:
                sites = [s for s in sites if s.line in args.line]
            say(f"{file}: {len(sites)} mutants")
            for i, site in enumerate(sites, 1):
                again = earlier.get((file, file_hash(file), site.index))
                if again is not None and again.get("failed") in session.items:
                    record = again  # killed before by a test that is still there (--resume)
                else:
                    record = _one(session, file, site, lines, equivalents, args)
                record["file_hash"] = file_hash(file)
                results.append(record)
                with log.open("a") as fh:
                    fh.write(json.dumps(record) + "\n")
                if i % 25 == 0 or i == len(sites):
                    done = [r for r in results if r["file"] == file]
                    killed = sum(r["status"] in ("killed", "timeout") for r in done)
                    say(f"  {file}: {i}/{len(sites)} ({killed} killed), {(time.monotonic() - started) / 60:.1f} min")

    start_pytest(stale + useful, _with_body(args, body, targets))
    return summarise(results, targets, time.monotonic() - started, args)


def _earlier_kills(log: Path) -> dict[tuple[str, str, int], dict[str, Any]]:
    """Mutants an earlier run of the same name killed, by (file, file hash, index)."""
    out: dict[tuple[str, str, int], dict[str, Any]] = {}
    if not log.exists():
        return out
    for line in log.read_text().splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("status") in ("killed", "timeout") and r.get("file_hash"):
            out[(r["file"], r["file_hash"], r["index"])] = r
    return out


def _with_body(args: argparse.Namespace, body: Callable[[Session], None], targets: list[str]) -> Session:
    args.body = body
    return Session(args, targets)


def _one(session: Session, file: str, site: Site, lines: list[str], equivalents: dict, args: Any) -> dict[str, Any]:
    key = site.key(lines)
    record: dict[str, Any] = {"file": file, "line": site.line, "col": site.col, "index": site.index,
                              "code": key[1], "mutation": site.mutation, "nth": site.nth, "scope": site.scope}
    nodeids = _select_for(site, session)
    if not nodeids:
        record["status"] = "no-test"
    else:
        def apply(file: str = file, index: int = site.index) -> int:
            tree, s = mutated_tree(file, index)
            return apply_tree(file, tree, s.scope, s.line)

        timeout = 10 + args.timeout_factor * session.budget(nodeids)
        result = session.run_mutant(nodeids, apply, timeout)
        if result.status == "timeout":
            control = session.control_time(nodeids)
            if control * 1.5 > timeout:  # the tests are this slow anyway: give the mutant room and ask again
                result = session.run_mutant(nodeids, apply, max(30.0, 3 * control))
        record.update(status=result.status, failed=result.failed, ran=result.ran, tests=len(nodeids),
                      seconds=round(result.seconds, 2), detail=result.detail)
    if record["status"] in ("survived", "no-test", "unapplied") and key in equivalents:
        record["equivalent"] = equivalents[key]
    flag = {"killed": ".", "timeout": "T", "survived": "S", "no-test": "N", "unapplied": "U", "error": "E"}
    mark = flag.get(record["status"], "?")
    if mark in "SNU" and "equivalent" in record:
        mark = "e"
    if mark in "SNUE?":
        say(f"  {mark} {file}:{site.line} {site.mutation}  [{record.get('tests', 0)} tests] {record.get('detail', '')}")
    return record


def summarise(results: list[dict[str, Any]], targets: list[str], seconds: float, args: Any) -> int:
    WORK.mkdir(parents=True, exist_ok=True)
    name = args.out or "-".join(m.replace("/", "_") for m in args.modules)
    out = WORK / f"{name}.json"
    out.write_text(json.dumps(results, indent=1))
    print(f"\nmutation run: {', '.join(args.modules)}; {len(results)} mutants in {seconds / 60:.1f} min "
          f"(results: {out.relative_to(ROOT)})\n")
    print("| module | mutants | killed | timeout | equivalent | survived | no test | unapplied | error |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    unexplained = []
    for file in targets:
        rows = [r for r in results if r["file"] == file]
        count = {k: 0 for k in ("killed", "timeout", "equivalent", "survived", "no-test", "unapplied", "error")}
        for r in rows:
            if "equivalent" in r:
                count["equivalent"] += 1
            else:
                count[r["status"]] = count.get(r["status"], 0) + 1
                if r["status"] not in ("killed", "timeout"):
                    unexplained.append(r)
        print(f"| {file} | {len(rows)} | " + " | ".join(str(count[k]) for k in count) + " |")
    changed = changed_during_run()
    if changed:
        print(f"\nWARNING: changed on disk during the run (results are for the version read at the start): "
              f"{', '.join(changed)}")
    if unexplained:
        print(f"\n{len(unexplained)} unexplained (survived, no test, unapplied or error):")
        for r in unexplained:
            print(f"- {r['file']}:{r['line']} `{r['code']}`: {r['mutation']} [{r['status']}] {r.get('detail', '')}")
        stubs = WORK / f"{name}-unexplained.toml"
        stubs.write_text("".join(
            f"[[equivalent]]\nfile = {json.dumps(r['file'])}\ncode = {json.dumps(r['code'])}\n"
            f"mutation = {json.dumps(r['mutation'])}\n" + (f"nth = {r['nth']}\n" if r.get("nth", 1) > 1 else "")
            + f"reason = \"\"  # line {r['line']}, {r['status']}\n\n" for r in unexplained))
        print(f"\n(each as an [[equivalent]] stub to fill in or to kill with a test: {stubs.relative_to(ROOT)})")
    return 1 if unexplained else 0


def _group_of(file: str) -> str:
    """The group a module belongs to (its path when none: then every test file is used)."""
    return next((name for name, (patterns, _) in GROUPS.items() if any(Path(file).match(p) for p in patterns)),
                file)


def list_command(args: argparse.Namespace) -> int:
    for file in group_files(args.modules):
        source, sites = module_sites(file)
        lines = source.splitlines()
        for s in sites:
            nth = f" (nth {s.nth})" if s.nth > 1 else ""
            print(f"{file}:{s.line}:{s.index} [{s.scope}] {lines[s.line - 1].strip()[:60]!r}: {s.mutation}{nth}")
        print(f"{file}: {len(sites)} mutants", file=sys.stderr)
    return 0


def plant_command(args: argparse.Namespace) -> int:
    """Hand-made mutants from a TOML file: [[mutant]] file, old (exact text, once in the file), new, tests?"""
    spec = tomllib.loads(Path(args.spec).read_text())
    mutants = spec.get("mutant", [])
    files = sorted({m["file"] for m in mutants})
    for file in files:
        read_source(file)
    traced = sorted({m["file"] for m in mutants if not m.get("tests")})  # the others name their tests
    all_tests = _glob(args.tests) if args.tests else group_tests(sorted({_group_of(f) for f in traced}))
    stale, useful = needed_test_files(traced, all_tests) if traced else ([], [])
    explicit = sorted({t.split("::")[0] for m in mutants for t in m.get("tests", [])})
    rows: list[str] = []
    caught = 0

    def body(session: Session) -> None:
        nonlocal caught
        if stale:
            session.trace(stale, traced)
        session.load_coverage(stale + useful)
        for m in mutants:
            source = read_source(m["file"])
            if source.count(m["old"]) != 1:
                rows.append(f"| {m['file']} | `{m['old']}` | not found once in the file | |")
                continue
            start = source.index(m["old"])
            first = source.count("\n", 0, start) + 1
            last = first + m["old"].count("\n")
            new_source = source.replace(m["old"], m["new"])
            tests = m.get("tests") or session.select(m["file"], tuple(range(first, last + 1)))
            tests = [t for t in tests if t in session.items]

            def apply(file: str = m["file"], new_source: str = new_source) -> int:
                return apply_tree(file, ast.parse(new_source, file), "module", 0)

            result = session.run_mutant(tests, apply, timeout=60 + 3 * session.budget(tests)) if tests else None
            status = result.status if result else "no-test"
            caught += status in ("killed", "timeout")
            by = result.failed if result and result.failed else ""
            rows.append(f"| {m['file']}:{first} | `{m['old'].strip()}` -> `{m['new'].strip()}` | {status} | {by} |")
            say(rows[-1])

    start_pytest(sorted(set(stale + useful + explicit)), _with_body(args, body, files))
    print("| where | mutant | result | first failing test |")
    print("|---|---|---|---|")
    print("\n".join(rows))
    print(f"\n{caught} of {len(mutants)} caught")
    return 0 if caught == len(mutants) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="mutate modules and run their covering tests")
    run.add_argument("modules", nargs="+", help=f"groups ({', '.join(GROUPS)}) or files under qcheck/")
    run.add_argument("--tests", nargs="*", default=[],
                     help="test files (globs) instead of the groups' own, e.g. 'tests/test_*.py' for the whole suite")
    run.add_argument("--line", type=int, nargs="*", default=[], help="only mutants on these lines")
    run.add_argument("--timeout-factor", type=float, default=2.0)
    run.add_argument("--out", help="name of the results file under bench/_work/mutation/")
    run.add_argument("--max-test-seconds", type=float, default=10.0,
                     help="leave out tests slower than this under the tracer, their file's costliest setup included "
                          "(end-to-end runs that build models: each child would pay for them again)")
    run.add_argument("--resume", action="store_true",
                     help="keep the kills of the last run of the same name (same file contents): run the rest")
    lst = sub.add_parser("list", help="list the mutants of modules")
    lst.add_argument("modules", nargs="+")
    plant = sub.add_parser("plant", help="run hand-made mutants from a TOML file")
    plant.add_argument("spec")
    plant.add_argument("--tests", nargs="*", default=[], help="test files (globs) instead of the modules' groups")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT))
    if args.command == "list":
        return list_command(args)
    if args.command == "plant":
        return plant_command(args)
    return run_command(args)


if __name__ == "__main__":
    sys.exit(main())
