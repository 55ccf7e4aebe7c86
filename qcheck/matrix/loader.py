"""Load and validate the matrix data once per process: ``matrices/gpus.toml`` + ``matrices/engines/*.toml``.

Every file is checked against matrices/SCHEMA.md; the first violation raises ``MatrixDataError`` with
file, rule, check name and problem. The validated, compiled matrix is cached per directory. Engine files are
read, validated and compiled when an engine is first used (``EngineSet``): a check of one engine reads
``gpus.toml``, ``suggestions.toml`` and that engine's file; ``Matrix.validate()`` (``qcheck matrix --validate``)
reads them all.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, ItemsView, Iterator, Mapping, ValuesView
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qcheck.errors import UsageError
from qcheck.formats import REGISTRY
from qcheck.matrix import files
from qcheck.matrix.conditions import MatchCondition, compile_hardware, compile_match
from qcheck.matrix.gpus import GpuTable, build_gpu_table, normalise
from qcheck.matrix.schema import (
    ATTENTION_KEYS,
    ATTENTION_KINDS,
    ATTENTION_RULE_KEYS,
    BACKEND_KEYS,
    BUILD_KEYS,
    ENGINE_FILE_KEYS,
    ENGINE_KEYS,
    KINDS,
    KNOWN_ISSUE_EFFECTS,
    KNOWN_ISSUE_KEYS,
    KNOWN_ISSUE_STATES,
    KNOWN_ISSUE_VERIFIED,
    KV_CACHE_KEYS,
    KV_PAIR_KEYS,
    KV_PLACEHOLDERS,
    KV_RULE_KEYS,
    KV_SCALE_MISSING,
    KV_SCALE_PLACEHOLDERS,
    KV_SCALE_RULE_KEYS,
    LOADED_DTYPES,
    MODIFIER_KEYS,
    PARALLEL_KEYS,
    PLACEHOLDERS,
    RULE_KEYS,
    SOURCE_KEYS,
    STATUSES,
    SUGGESTION_KEYS,
    SUGGESTION_PLACEHOLDERS,
    SUGGESTIONS_FILE_KEYS,
    VENDORS,
    AttentionRule,
    AttentionSpec,
    Backend,
    Build,
    Engine,
    KnownIssue,
    KvCache,
    KvPair,
    KvRule,
    KvScaleRule,
    MatrixDataError,
    ParallelSpec,
    Rule,
    SourceSpec,
    SuggestionRule,
    Where,
    check_keys,
    require_str,
    type_name,
)
from qcheck.matrix.versions import (
    SCHEMES,
    contains,
    parse_ordered,
    parse_specifier,
    parse_verified,
    parse_version,
)

_CC_VALUE = re.compile(r"^\d{1,2}\.\d$")

if TYPE_CHECKING:
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    from qcheck.engine_words import EngineWords
    from qcheck.matrix.versions import Verified


_RULE_ID = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_SOURCE_NAME = re.compile(r"^[a-z0-9_]+$")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_ENGINE_ID = re.compile(r"^[a-z0-9][a-z0-9.+-]*$")


class EngineSet(Mapping[str, Engine]):
    """The engines of a matrix by id (the engine file's stem), each file read, validated and compiled on its first
    use: a check of one engine reads one engine file. Iterating the ids reads nothing; ``values()``/``items()``
    (explore mode, listings, ``--validate``) load every engine and check every name once."""

    def __init__(self, root: Path, files: dict[str, Path], gpus: GpuTable, issues: Path | None = None):
        self._root = root
        self._files = files
        self._gpus = gpus
        #: ``known_issues.toml``: read on the first engine load, each entry attached when its engine is loaded
        self._issues = issues
        self._issues_raw: dict[str, Any] | None = None
        self._loaded: dict[str, Engine] = {}
        self._raw: dict[str, dict[str, Any]] = {}
        self._names: dict[str, str] | None = None
        stems: dict[str, str | None] = {}
        for ident in files:
            key = normalise(ident)
            stems[key] = ident if key not in stems else None  # two stems with one key: only the full index knows
        self._stems = stems

    def __getitem__(self, ident: str) -> Engine:
        engine = self._loaded.get(ident)
        if engine is None:
            raw = self._raw.pop(ident, None)
            if raw is None:
                raw = files.read_toml(self._root, self._files[ident])  # KeyError: no such engine
            engine = _load_engine(self._root, self._files[ident], self._gpus, raw)
            if self._issues is not None:
                if self._issues_raw is None:
                    self._issues_raw = files.read_toml(self._root, self._issues)
                _load_known_issues(self._issues_raw, files.display(self._root, self._issues), engine, self._gpus,
                                   self._files)
            self._loaded[ident] = engine
        return engine

    def __iter__(self) -> Iterator[str]:
        return iter(self._files)

    def __len__(self) -> int:
        return len(self._files)

    def __contains__(self, ident: object) -> bool:
        return ident in self._files

    def values(self) -> ValuesView[Engine]:
        self.load_all()
        return super().values()

    def items(self) -> ItemsView[str, Engine]:
        self.load_all()
        return super().items()

    def loaded(self) -> list[str]:
        """The ids of the engines read and validated so far (for tests and ``--validate``)."""
        return list(self._loaded)

    def load_all(self) -> None:
        """Read and validate every engine file, then check that no two engines claim one name."""
        for ident in self._files:
            self[ident]
        self.names()

    def find(self, name: str) -> str | None:
        """The id of the engine ``name`` (id, display name or alias, normalised) names, or None. An engine's own
        id is found from the file names alone; a display name or alias needs every file's ``[engine]`` table."""
        key = normalise(name)
        if self._names is None and self._stems.get(key) is not None:
            return self._stems[key]
        return self.names().get(key)

    def names(self) -> dict[str, str]:
        """Every normalised id, display name and alias -> engine id; a name claimed by two engines is an error
        naming the second file."""
        if self._names is None:
            owners: dict[str, str] = {}
            for ident in self._files:
                name, aliases, where = self._head(ident)
                for label in (ident, name, *aliases):
                    key = normalise(label)
                    if owners.setdefault(key, ident) != ident:
                        raise MatrixDataError(where, "duplicate-name",
                                              f"engine name {label!r} is also used by engine '{owners[key]}'")
            self._names = owners
        return self._names

    def _head(self, ident: str) -> tuple[str, tuple[str, ...], str]:
        """(display name, aliases, file as shown) of one engine, from its ``[engine]`` table without validating
        the rest of the file; a malformed table is validated at once, which names the problem."""
        engine = self._loaded.get(ident)
        if engine is None:
            raw = self._raw.get(ident)
            if raw is None:
                raw = self._raw[ident] = files.read_toml(self._root, self._files[ident])
            head = raw.get("engine")
            name = head.get("name") if isinstance(head, dict) else None
            aliases = head.get("aliases", []) if isinstance(head, dict) else None
            if isinstance(name, str) and isinstance(aliases, list) and all(isinstance(a, str) for a in aliases):
                return name, tuple(aliases), files.display(self._root, self._files[ident])
            engine = self[ident]
        return engine.name, engine.aliases, engine.file


class Matrix:
    """Engines, GPUs and suggestions, validated: the GPU table and the shared suggestions when the matrix is
    loaded, each engine file when that engine is first used (``engines``, an ``EngineSet``)."""

    def __init__(self, root: Path, gpus: GpuTable, engines: EngineSet, suggestions: list[SuggestionRule],
                 shared_sources: dict[str, SourceSpec]):
        self.root = root
        self.gpus = gpus
        self.engines = engines
        #: suggestions from suggestions.toml (engine-independent)
        self.suggestions = suggestions
        self.shared_sources = shared_sources
        #: how each engine is told the memory advice's settings (suggestions.toml [[engine_words]])
        self.engine_words: dict[str, EngineWords] = {}

    def engine(self, name: str) -> Engine:
        """Find an engine by id, display name or alias (case- and punctuation-insensitive)."""
        ident = self.engines.find(name)
        if ident is not None:
            return self.engines[ident]
        import difflib

        names = self.engines.names()
        close = difflib.get_close_matches(normalise(name), list(names), n=4, cutoff=0.5)
        hint = f"; did you mean: {', '.join(dict.fromkeys(names[c] for c in close))}?" if close else ""
        raise UsageError(f"unknown engine {name!r}{hint} (known: {', '.join(sorted(self.engines))})")

    def validate(self) -> None:
        """Read and validate every engine file now (``qcheck matrix --validate``, the data tests), with the facts
        files of their generated rules."""
        from qcheck.matrix.generated import validate_facts

        self.engines.load_all()
        for engine in self.engines.values():
            if engine.generated_facts is not None:
                validate_facts(self.root, engine.generated_facts, engine.id, engine.scheme)


_CACHE: dict[Path, Matrix] = {}


def load_matrix(root: str | Path | None = None) -> Matrix:
    """The matrix under ``root`` (default: ``$QCHECK_MATRICES`` or the shipped ``matrices/``), loaded once per
    process: ``gpus.toml`` and ``suggestions.toml`` validated now, each engine file when first used
    (``Matrix.validate()`` validates them all)."""
    if root is None:
        root = os.environ.get("QCHECK_MATRICES") or None
    if root is None:
        from qcheck.data import data_dir

        root = data_dir("matrices")
    path = Path(root).resolve()
    cached = _CACHE.get(path)
    if cached is None:
        cached = _CACHE[path] = _load(path)
    return cached


def clear_cache() -> None:
    """Forget loaded matrices and architecture files (tests that rewrite a matrix directory in place)."""
    from qcheck.matrix import architectures

    _CACHE.clear()
    architectures.clear_cache()


def _load(root: Path) -> Matrix:
    gpu_file = root / "gpus.toml"
    if not gpu_file.is_file():
        raise MatrixDataError(files.display(root, gpu_file), "missing-key", "gpus.toml is missing")
    gpus = build_gpu_table(files.read_toml(root, gpu_file), files.display(root, gpu_file))
    engine_dir = root / "engines"
    engine_files = {f.stem: f for f in sorted(engine_dir.glob("*.toml"))} if engine_dir.is_dir() else {}
    shared_sources: dict[str, SourceSpec] = {}
    suggestions: list[SuggestionRule] = []
    words: dict[str, EngineWords] = {}
    sfile = root / "suggestions.toml"
    if sfile.is_file():
        display = files.display(root, sfile)
        raw = files.read_toml(root, sfile)
        for key in raw:
            if key not in SUGGESTIONS_FILE_KEYS:
                raise MatrixDataError(display, "unknown-key", f"unknown top-level key {key!r} "
                                      f"(allowed: {', '.join(sorted(SUGGESTIONS_FILE_KEYS))})")
        shared_sources = _load_sources(raw.get("sources", {}), display)
        suggestions = _load_suggestions(raw.get("suggestion", []), display, None, shared_sources, gpus, None)
        from qcheck.engine_words import parse_engine_words

        words = parse_engine_words(raw.get("engine_words", []), set(engine_files), shared_sources,
                                   Where(display, "[[engine_words]]"))
    kfile = root / "known_issues.toml"
    matrix = Matrix(root, gpus, EngineSet(root, engine_files, gpus, kfile if kfile.is_file() else None), suggestions,
                    shared_sources)
    matrix.engine_words = words
    return matrix


def _load_known_issues(raw: dict[str, Any], display: str, engine: Engine, gpus: GpuTable, known: Collection[str]) -> None:
    """``known_issues.toml``: every ``[[issue]]`` about ``engine`` checked like a rule (versions, methods, match,
    hardware, backend, KV pair, knobs against the engine's data) and attached to it (``Engine.known_issues``); the
    others only for their id and engine name (each is checked in full when its engine is loaded)."""
    for key in raw:
        if key != "issue":
            raise MatrixDataError(display, "unknown-key", f"unknown top-level key {key!r} (allowed: [[issue]])")
    seen: set[str] = set()
    required = {"id", "engine", "effect", "title", "message", "links", "verified", "evidence", "verified_at",
                "tracker_state"}
    for index, entry, ctx in entries_of(raw.get("issue", []), "issue", display, KNOWN_ISSUE_KEYS, required):
        ident = require_str(entry, "id", ctx)
        if not _RULE_ID.match(ident) or ident in seen:
            ctx.fail("duplicate-rule-id" if ident in seen else "bad-id", f"issue id {ident!r} is reused or malformed")
        seen.add(ident)
        name = require_str(entry, "engine", ctx)
        if name not in known:
            ctx.fail("undefined-source", f"engine {name!r} is not an engine file (known: {', '.join(sorted(known))})")
        if name != engine.id:
            continue
        choices = {"effect": KNOWN_ISSUE_EFFECTS, "verified": KNOWN_ISSUE_VERIFIED,
                   "tracker_state": KNOWN_ISSUE_STATES}
        for key, allowed in choices.items():
            if entry.get(key) not in allowed:
                ctx.fail("bad-match-value", f"{key} {entry.get(key)!r} is not one of {', '.join(allowed)}")
        links = _str_list(entry, "links", ctx)
        if not all(link.startswith("https://") for link in links):
            ctx.fail("missing-source", "links must be https:// URLs of the tracker reports and fixes")
        verified_at = require_str(entry, "verified_at", ctx)
        try:
            parse_version(verified_at, engine.scheme)
        except ValueError as exc:
            ctx.fail("bad-version", f"verified_at: {exc}")
        evidence = require_str(entry, "evidence", ctx)
        pair = _kv_pair(entry, engine.kv_cache, ctx) if any(k in entry for k in KV_PAIR_KEYS) else None
        knobs = _kv_knobs(entry.get("knobs"), ctx) if "knobs" in entry else ()
        effect = entry["effect"]
        message = require_str(entry, "message", ctx)
        sources = {"evidence": {"ref": evidence, "version": verified_at},
                   **{f"link{i}": {"ref": link, "version": verified_at} for i, link in enumerate(links)}}
        body: dict[str, Any] = {k: entry[k] for k in ("id", "versions", "methods", "match", "hardware", "backend")
                                if k in entry}
        body.update(status="native" if effect == "warning" else effect, reasons=[message], sources=list(sources),
                    kernel="as the engine picks it, with the issue" if effect == "fallback" else None)
        holder = Engine(id=engine.id, name=engine.name, file=display, aliases=(), kind=engine.kind,
                        scheme=engine.scheme, versions=engine.versions, parsed_versions=engine.parsed_versions,
                        hardware=engine.hardware, hardware_sources=(), backends=engine.backends,
                        sources=_load_sources(sources, display))
        rule = _load_rule({k: v for k, v in body.items() if v is not None}, index, holder, gpus,
                          placeholders=KV_PLACEHOLDERS)
        rule.extra_conditions = (pair.conditions if pair else 0) + len(knobs)
        _check_claims(entry.get("claims", []), ctx)
        workaround = entry.get("workaround")
        if workaround is not None and (not isinstance(workaround, str) or not workaround.strip()):
            ctx.fail("bad-type", "workaround must be a non-empty string")
        engine.known_issues.append(KnownIssue(
            rule, effect, require_str(entry, "title", ctx), message, tuple(links), entry["verified"], evidence,
            verified_at, entry["tracker_state"], workaround, pair, knobs))


def _check_claims(claims: Any, ctx: Where) -> None:
    """An issue's code evidence as matrices/tools/claims.toml claims (re-checked by verify_known_issues.py)."""
    if not isinstance(claims, list):
        ctx.fail("bad-type", "claims must be an array of tables")
    for claim in claims:
        if not isinstance(claim, dict) or not {"package", "version", "dist", "path", "pattern"} <= set(claim) \
                or sum(k in claim for k in ("expect", "expect_items", "present")) != 1:
            ctx.fail("missing-key", "each claim needs package, version, dist, path, pattern and one of expect, "
                                    "expect_items, present")
        try:
            re.compile(str(claim["pattern"]))
        except re.error as exc:
            ctx.fail("bad-match-value", f"claim pattern {claim['pattern']!r}: {exc}")


def _load_engine(root: Path, file: Path, gpus: GpuTable, raw: dict[str, Any]) -> Engine:
    """One engine file, validated against matrices/SCHEMA.md and compiled."""
    display = files.display(root, file)
    ctx = Where(display)
    for key in raw:
        if key not in ENGINE_FILE_KEYS:
            ctx.fail("unknown-key", f"unknown top-level key {key!r} "
                     "(allowed: [engine], [sources], [[rule]], [[modifier]], [[suggestion]], [[build]], [kv_cache], "
                     "[[kv_rule]], [[kv_scale_rule]], [attention], [[attention_rule]], [parallel], [memory])")
    head = raw.get("engine")
    if not isinstance(head, dict):
        ctx.fail("missing-key", "missing the [engine] table")
    engine = _engine_head(head, _load_sources(raw.get("sources", {}), display), display, file.stem)
    _load_rules(raw, engine, gpus)
    generated = root / "generated" / f"{engine.id}.toml"
    if generated.is_file():
        _load_generated(root, generated, engine, gpus, raw)
    engine.suggestions = _load_suggestions(raw.get("suggestion", []), display, engine.id, engine.sources, gpus,
                                           engine)
    engine.builds = _load_builds(raw.get("build", []), engine)
    engine.kv_cache, engine.kv_rules = _load_kv(raw, engine, gpus)
    engine.kv_scale_rules = _load_kv_scale_rules(raw.get("kv_scale_rule", []), engine, gpus)
    engine.attention, engine.attention_rules = _load_attention(raw, engine, gpus)
    if engine.generated_rules is not None:
        engine.kv_rules += engine.generated_rules[0]
        engine.attention_rules += engine.generated_rules[1]
        engine.generated_rules = None
    engine.parallel = _load_parallel(raw.get("parallel"), engine)
    if "memory" in raw:
        from qcheck.matrix.memory_params import parse_memory

        engine.memory = parse_memory(raw["memory"], engine.id, display, engine.scheme)
    return engine


def _engine_head(head: dict[str, Any], sources: dict[str, SourceSpec], display: str, stem: str) -> Engine:
    """The ``[engine]`` table: id (= the file name), kind, versions, hardware and backends."""
    ectx = Where(display, "[engine]")
    check_keys(head, ENGINE_KEYS, {"id", "name", "kind", "versions"}, ectx)
    ident = require_str(head, "id", ectx)
    if not _ENGINE_ID.match(ident):
        ectx.fail("bad-id", f"engine id {ident!r} must be lower case letters, digits, '.', '+' or '-'")
    if ident != stem:
        ectx.fail("file-name-mismatch", f"engine id {ident!r} must equal the file name stem {stem!r}")
    kind = require_str(head, "kind", ectx)
    if kind not in KINDS:
        ectx.fail("bad-type", f"kind {kind!r} is not one of {', '.join(KINDS)}")
    scheme = head.get("version_scheme", "pep440")
    if scheme not in SCHEMES:
        ectx.fail("bad-type", f"version_scheme {scheme!r} is not one of {', '.join(SCHEMES)}")
    versions = _str_list(head, "versions", ectx)
    parsed = _parse_versions(versions, scheme, ectx)
    hardware, hardware_sources = _engine_hardware(head, kind, sources, ectx)
    rules_verified = head.get("rules_verified", False)
    if not isinstance(rules_verified, bool):
        ectx.fail("bad-type", "rules_verified must be true or false")
    return Engine(
        id=ident, name=require_str(head, "name", ectx), file=display,
        aliases=tuple(_str_list(head, "aliases", ectx, allow_empty=True) if "aliases" in head else ()),
        kind=kind, scheme=scheme, versions=tuple(versions), parsed_versions=tuple(parsed),
        hardware=tuple(hardware), hardware_sources=hardware_sources, backends=_load_backends(head, display),
        sources=sources, note=head.get("note"), floor=_data_floor(parsed, sources, scheme),
        rules_verified=rules_verified,
    )


def _parse_versions(versions: list[str], scheme: str, ctx: Where) -> list[Version]:
    """``versions``, parsed in the engine's scheme and strictly increasing."""
    try:
        return parse_ordered(versions, scheme)
    except ValueError as exc:
        ctx.fail("versions-order" if "increasing" in str(exc) else "bad-version", f"versions: {exc}")


def _engine_hardware(head: dict[str, Any], kind: str, sources: dict[str, SourceSpec], ctx: Where
                     ) -> tuple[list[str], tuple[SourceSpec, ...]]:
    """(vendors, where that was read): a provider runs on its own hardware and names none."""
    if kind == "provider":
        if "hardware" in head:
            ctx.fail("hardware-on-provider", "providers run on the provider's hardware: no 'hardware' list")
        return [], ()
    hardware = _str_list(head, "hardware", ctx)
    for vendor in hardware:
        if vendor not in VENDORS:
            ctx.fail("unknown-vendor", f"hardware: {vendor!r} is not one of {', '.join(VENDORS)}")
    if "hardware_sources" not in head:
        ctx.fail("missing-source", "hardware needs hardware_sources naming where it was read")
    return hardware, _resolve_sources(_str_list(head, "hardware_sources", ctx), sources, ctx)


def _load_backends(head: dict[str, Any], display: str) -> dict[str, Backend]:
    """``[engine] backends``: each backend's vendors, and on which of them it is the default (one per vendor)."""
    backends: dict[str, Backend] = {}
    raw_backends = head.get("backends", {})
    if not isinstance(raw_backends, dict):
        Where(display, "[engine]").fail("bad-type", f"backends must be a table, not {type_name(raw_backends)}")
    for name, spec in raw_backends.items():
        bctx = Where(display, f"[engine] backends.{name}")
        if not isinstance(spec, dict):
            bctx.fail("bad-type", "each backend must be a table like { vendors = [\"nvidia\"] }")
        check_keys(spec, BACKEND_KEYS, {"vendors"}, bctx)
        vendors = _str_list(spec, "vendors", bctx)
        for vendor in vendors:
            if vendor not in VENDORS:
                bctx.fail("unknown-vendor", f"vendors: {vendor!r} is not one of {', '.join(VENDORS)}")
        default_for = _backend_default(spec.get("default", True), vendors, bctx)
        for vendor in default_for:
            other = next((b.name for b in backends.values() if vendor in b.default_for), None)
            if other is not None:
                bctx.fail("ambiguous-backend", f"both {other} and {name} would be the default backend on {vendor} "
                                               "hardware: set default = false, or default = [vendors], on one")
        backends[name] = Backend(name, tuple(vendors), default_for, spec.get("note"))
    return backends


def _backend_default(default: Any, vendors: list[str], ctx: Where) -> tuple[str, ...]:
    """A backend's ``default``: true (all its vendors), false (none) or the list of vendors it is the default for."""
    if isinstance(default, bool):
        return tuple(vendors) if default else ()
    if isinstance(default, list) and all(isinstance(v, str) for v in default):
        for vendor in default:
            if vendor not in vendors:
                ctx.fail("bad-value", f"default: {vendor!r} is not one of this backend's vendors "
                                      f"({', '.join(vendors)})")
        return tuple(default)
    ctx.fail("bad-type", "default must be true, false or a list of the vendors it is the default for")


def _load_rules(raw: dict[str, Any], engine: Engine, gpus: GpuTable) -> None:
    """``[[rule]]`` and ``[[modifier]]`` into ``engine.rules`` / ``engine.modifiers``; ids are unique across both."""
    seen: dict[str, str] = {}
    for kind, modifier, into in (("rule", False, engine.rules), ("modifier", True, engine.modifiers)):
        raw_rules = raw.get(kind, [])
        if not isinstance(raw_rules, list):
            Where(engine.file).fail("bad-type", f"[[{kind}]] must be an array of tables")
        for index, entry in enumerate(raw_rules):
            rule = _load_rule(entry, index, engine, gpus, modifier=modifier)
            if rule.id in seen:
                Where(engine.file, rule.label).fail("duplicate-rule-id",
                                                    f"id {rule.id!r} is also used by {seen[rule.id]}")
            seen[rule.id] = rule.label
            into.append(rule)


GENERATED_KEYS = {"generated", "sources", "rule", "kv_rule", "attention_rule"}
GENERATED_HEAD_KEYS = {"engine", "generated_by", "releases", "facts", "note"}


def _load_generated(root: Path, file: Path, engine: Engine, gpus: GpuTable, raw: dict[str, Any]) -> None:
    """``matrices/generated/<engine>.toml``: rules an extractor wrote from the released code (matrices/SCHEMA.md
    §2.8), validated like the hand-written ones (every one with ``verified``) and appended to them, marked
    ``generated``; their ``[sources]`` are the generated file's own. Ids are unique across both files."""
    display = files.display(root, file)
    data = files.read_toml(root, file)
    ctx = Where(display)
    for key in data:
        if key not in GENERATED_KEYS:
            ctx.fail("unknown-key", f"unknown top-level key {key!r} (allowed: [generated], [sources], [[rule]], "
                                    "[[kv_rule]], [[attention_rule]])")
    head = data.get("generated")
    hctx = Where(display, "[generated]")
    if not isinstance(head, dict):
        ctx.fail("missing-key", "missing the [generated] table")
    check_keys(head, GENERATED_HEAD_KEYS, {"engine", "generated_by", "releases"}, hctx)
    if head["engine"] != engine.id:
        hctx.fail("file-name-mismatch", f"engine {head['engine']!r} must be {engine.id!r} (the file name)")
    releases = _str_list(head, "releases", hctx)
    _parse_versions(releases, engine.scheme, hctx)
    holder = Engine(id=engine.id, name=engine.name, file=display, aliases=(), kind=engine.kind, scheme=engine.scheme,
                    versions=engine.versions, parsed_versions=engine.parsed_versions, hardware=engine.hardware,
                    hardware_sources=(), backends=engine.backends,
                    sources=_generated_sources(data, display, engine), rules_verified=True)
    _load_rules({"rule": data.get("rule", [])}, holder, gpus)
    extra: dict[str, Any] = {k: raw[k] for k in ("kv_cache", "attention") if k in raw}
    _, holder.kv_rules = _load_kv({**extra, "kv_rule": data.get("kv_rule", [])}, holder, gpus)
    _, holder.attention_rules = _load_attention({**extra, "attention_rule": data.get("attention_rule", [])}, holder,
                                                gpus)
    hand = {r.id for r in engine.rules} | {r.id for r in engine.modifiers} | {r.rule.id for r in engine.kv_rules}
    for rule in [*holder.rules, *(r.rule for r in holder.kv_rules), *(r.rule for r in holder.attention_rules)]:
        if rule.id in hand:
            Where(display, rule.label).fail("duplicate-rule-id", f"id {rule.id!r} is also a rule of {engine.file}")
        rule.generated = True
    engine.rules.extend(holder.rules)
    engine.generated_rules = (holder.kv_rules, holder.attention_rules)
    engine.generated_releases = tuple(releases)
    if "facts" in head:
        facts = root / require_str(head, "facts", hctx)
        if not facts.is_file() or root.resolve() not in facts.resolve().parents:
            hctx.fail("missing-key", f"facts file {head['facts']!r} does not exist under {root.name}/")
        engine.generated_facts = facts


def _generated_sources(data: dict[str, Any], display: str, engine: Engine) -> dict[str, SourceSpec]:
    """The generated file's ``[sources]`` beside the engine file's (which its ``[kv_cache]``/``[attention]`` name);
    a name both define is an error."""
    own = _load_sources(data.get("sources", {}), display)
    for name in own:
        if name in engine.sources:
            Where(display, f"[sources] {name}").fail("duplicate-name", f"source {name!r} is also defined in "
                                                                       f"{engine.file}")
    return {**engine.sources, **own}


def _load_parallel(table: Any, engine: Engine) -> ParallelSpec | None:
    """``[parallel]``: layouts from tp/pp/ep, checks from qcheck.matrix.parallel.CHECKS."""
    from qcheck.matrix.parallel import CHECKS, LAYOUTS

    if table is None:
        return None
    ctx = Where(engine.file, "[parallel]")
    if not isinstance(table, dict):
        ctx.fail("bad-type", "[parallel] must be a table")
    check_keys(table, PARALLEL_KEYS, {"layouts", "sources"}, ctx)
    layouts = _str_list(table, "layouts", ctx)
    checks = _str_list(table, "checks", ctx, allow_empty=True) if "checks" in table else []
    for value, known, key in [*((v, LAYOUTS, "layouts") for v in layouts), *((v, CHECKS, "checks") for v in checks)]:
        if value not in known:
            ctx.fail("bad-match-value", f"{key}: {value!r} is not one of {', '.join(known)}")
    flags = table.get("flags", {})
    if not isinstance(flags, dict) or not all(isinstance(v, str) and v.strip() for v in flags.values()):
        ctx.fail("bad-type", "flags must be a table of layout = \"how the engine spells it\"")
    for key in flags:
        if key not in layouts:
            ctx.fail("bad-match-value", f"flags: {key!r} is not one of the layouts ({', '.join(layouts)})")
    return ParallelSpec(tuple(layouts), tuple(checks), _resolve_sources(_str_list(table, "sources", ctx),
                                                                         engine.sources, ctx), dict(flags))


def _load_kv(raw: dict[str, Any], engine: Engine, gpus: GpuTable) -> tuple[KvCache | None, list[KvRule]]:
    """``[kv_cache]`` (what the flag accepts) and ``[[kv_rule]]`` (rules about a (K, V) pair instead of methods)."""
    table = raw.get("kv_cache")
    kv = None
    if table is not None:
        kv = _load_kv_cache(table, engine)
    rules = []
    for index, entry, ctx in entries_of(raw.get("kv_rule", []), "kv_rule", engine.file, KV_RULE_KEYS,
                                        {"id", "status", "sources"}):
        pair = _kv_pair(entry, kv, ctx)
        knobs = _kv_knobs(entry.get("knobs"), ctx) if "knobs" in entry else ()
        rule = _load_rule({k: v for k, v in entry.items() if k not in KV_PAIR_KEYS and k != "knobs"}, index, engine,
                          gpus, placeholders=KV_PLACEHOLDERS)
        rule.extra_conditions = pair.conditions + len(knobs)
        rules.append(KvRule(rule, pair, knobs))
    return kv, rules


def _load_kv_scale_rules(entries: Any, engine: Engine, gpus: GpuTable) -> list[KvScaleRule]:
    """``[[kv_scale_rule]]``: a message (the engine's log line) for a quantised cache without calibrated scales."""
    out = []
    for index, entry, ctx in entries_of(entries, "kv_scale_rule", engine.file, KV_SCALE_RULE_KEYS,
                                        {"id", "dtypes", "missing", "message", "sources"}):
        if engine.kv_cache is None:
            ctx.fail("missing-key", "a [[kv_scale_rule]] needs the engine's [kv_cache]")
        dtypes = frozenset(v.lower() for v in _str_list(entry, "dtypes", ctx))
        if not dtypes <= set(engine.kv_cache.accepts):
            ctx.fail("bad-match-value", f"dtypes {sorted(dtypes - set(engine.kv_cache.accepts))} are not in "
                                        "[kv_cache] accepts")
        missing = entry.get("missing")
        if missing not in KV_SCALE_MISSING:
            ctx.fail("bad-match-value", f"missing {missing!r} is not one of {', '.join(KV_SCALE_MISSING)}")
        message = require_str(entry, "message", ctx)
        body = {k: v for k, v in entry.items() if k not in ("dtypes", "missing", "message")}
        rule = _load_rule({**body, "status": "native", "reasons": [message]}, index, engine, gpus,
                          placeholders=KV_SCALE_PLACEHOLDERS)
        rule.extra_conditions = 1
        out.append(KvScaleRule(rule, dtypes, missing))
    return out


def _load_attention(raw: dict[str, Any], engine: Engine,
                    gpus: GpuTable) -> tuple[AttentionSpec | None, list[AttentionRule]]:
    """``[attention]`` and ``[[attention_rule]]``: which attention backend the engine picks, per model attention type."""
    table = raw.get("attention")
    spec = None
    if table is not None:
        ctx = Where(engine.file, "[attention]")
        if not isinstance(table, dict):
            ctx.fail("bad-type", "[attention] must be a table")
        check_keys(table, ATTENTION_KEYS, {"flag", "sources"}, ctx)
        spec = AttentionSpec(require_str(table, "flag", ctx),
                             _resolve_sources(_str_list(table, "sources", ctx), engine.sources, ctx))
    rules = []
    for index, entry, ctx in entries_of(raw.get("attention_rule", []), "attention_rule", engine.file,
                                        ATTENTION_RULE_KEYS, {"id", "attention", "status", "sources"}):
        if spec is None:
            ctx.fail("missing-key", "an [[attention_rule]] needs the engine's [attention]")
        kind = entry.get("attention")
        if kind not in ATTENTION_KINDS:
            ctx.fail("bad-match-value", f"attention {kind!r} is not one of {', '.join(ATTENTION_KINDS)}")
        flags: dict[str, bool | None] = {}
        for key in ("sinks", "sliding"):
            if key in entry and not isinstance(entry[key], bool):
                ctx.fail("bad-type", f"{key} must be true or false")
            flags[key] = entry.get(key)
        kv_dtypes = None
        if "kv_dtypes" in entry:
            kv_dtypes = frozenset(v.lower() for v in _str_list(entry, "kv_dtypes", ctx))
            known = {"auto", *(engine.kv_cache.accepts if engine.kv_cache else ())}
            if not kv_dtypes <= known:
                ctx.fail("bad-match-value", f"kv_dtypes {sorted(kv_dtypes - known)} are neither 'auto' nor in "
                                            "[kv_cache] accepts")
        body = {k: v for k, v in entry.items() if k not in ("attention", "sinks", "sliding", "kv_dtypes")}
        rule = _load_rule(body, index, engine, gpus, placeholders=KV_PLACEHOLDERS)
        rule.extra_conditions = 1 + sum(v is not None for v in flags.values()) + (kv_dtypes is not None)
        rules.append(AttentionRule(rule, kind, flags["sinks"], flags["sliding"], kv_dtypes))
    return spec, rules


def _load_kv_cache(table: Any, engine: Engine) -> KvCache:
    ctx = Where(engine.file, "[kv_cache]")
    if not isinstance(table, dict):
        ctx.fail("bad-type", "[kv_cache] must be a table")
    check_keys(table, KV_CACHE_KEYS, {"flag", "accepts", "sources"}, ctx)
    for key in ("reads_checkpoint", "separate"):
        if not isinstance(table.get(key, False), bool):
            ctx.fail("bad-type", f"{key} must be true or false")
    accepts = tuple(v.lower() for v in _str_list(table, "accepts", ctx))
    separate = table.get("separate", False)
    default = table.get("default")
    if default is not None and (not isinstance(default, str) or default.lower() not in accepts):
        ctx.fail("bad-match-value", f"default {default!r} is not one of accepts")
    if separate and default is None:
        ctx.fail("missing-key", "an engine that sets K and V apart (separate = true) needs the default type of an "
                                "unset side ('default')")
    shown = tuple(_pair_text(p, accepts, ctx, "shown_pairs") for p in
                  (_str_list(table, "shown_pairs", ctx) if "shown_pairs" in table else []))
    quantised_v = table.get("quantised_v_requires")
    if quantised_v is not None and (not isinstance(quantised_v, str) or not quantised_v.strip()):
        ctx.fail("bad-type", "quantised_v_requires must be a non-empty string")
    return KvCache(require_str(table, "flag", ctx), accepts,
                   _resolve_sources(_str_list(table, "sources", ctx), engine.sources, ctx),
                   table.get("reads_checkpoint", True), separate, default.lower() if default else None, shown,
                   quantised_v)


def _kv_pair(entry: dict[str, Any], kv: KvCache | None, ctx: Where) -> KvPair:
    """The (K, V) conditions of a [[kv_rule]]: at least one, every type named among [kv_cache] accepts."""
    if not any(key in entry for key in KV_PAIR_KEYS):
        ctx.fail("missing-key", f"a [[kv_rule]] needs one of {', '.join(KV_PAIR_KEYS)}")
    accepts = kv.accepts if kv is not None else None

    def types(key: str) -> frozenset[str] | None:
        if key not in entry:
            return None
        values = frozenset(v.lower() for v in _str_list(entry, key, ctx))
        if accepts is not None and not values <= set(accepts):
            ctx.fail("bad-match-value", f"{key} {sorted(values - set(accepts))} are not in [kv_cache] accepts")
        return values

    pairs = None
    if "pairs" in entry:
        pairs = frozenset(_pair_text(p, accepts, ctx, "pairs") for p in _str_list(entry, "pairs", ctx))
    mixed = entry.get("mixed")
    if mixed is not None and not isinstance(mixed, bool):
        ctx.fail("bad-type", "mixed must be true (K and V differ) or false (the same type)")
    if (kv is None or not kv.separate) and (any(k in entry for k in ("k_dtypes", "v_dtypes", "pairs")) or mixed):
        ctx.fail("bad-match-value", "k_dtypes, v_dtypes, pairs and mixed = true need [kv_cache] separate = true "
                                    "(an engine with one setting caches K and V in the same type)")
    return KvPair(types("dtypes"), types("k_dtypes"), types("v_dtypes"), pairs, mixed)


def _pair_text(text: str, accepts: tuple[str, ...] | None, ctx: Where, key: str) -> tuple[str, str]:
    k, sep, v = text.lower().partition("-")
    if not sep or not k or not v or (accepts is not None and not {k, v} <= set(accepts)):
        ctx.fail("bad-match-value", f"{key}: {text!r} is not K-V with both types in [kv_cache] accepts (e.g. q8_0-q4_0)")
    return k, v


def _kv_knobs(raw: Any, ctx: Where) -> tuple[tuple[str, Any], ...]:
    """``knobs = { flash_attn = true }``: engine settings of the request (qcheck.request.EngineKnobs fields)."""
    import dataclasses

    from qcheck.request import EngineKnobs

    names = {f.name for f in dataclasses.fields(EngineKnobs)}
    if not isinstance(raw, dict) or not raw:
        ctx.fail("bad-type", "knobs must be a non-empty table like { flash_attn = true }")
    out = []
    for key, value in raw.items():
        if key not in names:
            ctx.fail("unknown-match-key", f"knobs: {key!r} is not an engine knob (known: {', '.join(sorted(names))})")
        if value == "null":
            value = None
        elif not isinstance(value, (bool, int, float)):
            ctx.fail("bad-match-value", f"knobs.{key} = {value!r}: expected true/false, a number or \"null\"")
        out.append((key, value))
    return tuple(out)


def _load_builds(raw: Any, engine: Engine) -> list[Build]:
    """``[[build]]`` entries: CUDA architectures of the released package (qcheck.matrix.builds)."""
    if not isinstance(raw, list):
        Where(engine.file).fail("bad-type", "[[build]] must be an array of tables")
    out = []
    for index, entry in enumerate(raw):
        ctx = Where(engine.file, f"build #{index + 1}")
        if not isinstance(entry, dict):
            ctx.fail("bad-type", "each [[build]] must be a table")
        check_keys(entry, BUILD_KEYS, {"cuda_sass", "reason", "sources"}, ctx)
        versions_text = entry.get("versions")
        versions = None
        if versions_text is not None:
            if not isinstance(versions_text, str):
                ctx.fail("bad-type", "versions must be a string such as '>=0.20.0'")
            try:
                versions = parse_specifier(versions_text, engine.scheme)
            except ValueError as exc:
                ctx.fail("bad-version-spec", str(exc))
        ccs = []
        for key in ("cuda_sass", "cuda_ptx"):
            values = _str_list(entry, key, ctx, allow_empty=True) if key in entry else []
            for cc in values:
                if not _CC_VALUE.match(cc):
                    ctx.fail("bad-type", f"{key}: {cc!r} is not a compute capability like '8.0'")
            ccs.append(tuple(values))
        out.append(Build(versions, versions_text, ccs[0], ccs[1], require_str(entry, "reason", ctx),
                         _resolve_sources(_str_list(entry, "sources", ctx), engine.sources, ctx)))
    return out


def _data_floor(parsed: list[Version], sources: dict[str, SourceSpec], scheme: str) -> Version | None:
    """The oldest version any fact of the file was read at: its oldest listed version, or an older source
    version that parses as a version (free-text versions such as "issue of 2024" do not count)."""
    read: list[Version] = list(parsed[:1])
    for spec in sources.values():
        try:
            read.append(parse_version(spec.version, scheme))
        except ValueError:
            continue
    return min(read) if read else None


def _load_sources(raw: Any, display: str) -> dict[str, SourceSpec]:
    ctx = Where(display, "[sources]")
    if not isinstance(raw, dict):
        ctx.fail("bad-type", "[sources] must be a table of { ref = ..., version = ... }")
    out = {}
    for name, spec in raw.items():
        sctx = Where(display, f"[sources] {name}")
        if not _SOURCE_NAME.match(name):
            sctx.fail("bad-id", f"source name {name!r} must use only a-z, 0-9 and _")
        if not isinstance(spec, dict):
            sctx.fail("bad-type", "a source must be a table { ref = \"...\", version = \"...\" }")
        check_keys(spec, SOURCE_KEYS, {"ref", "version"}, sctx)
        out[name] = SourceSpec(name, require_str(spec, "ref", sctx), require_str(spec, "version", sctx),
                               spec.get("note"))
    return out


def _resolve_sources(names: list[str], sources: dict[str, SourceSpec], ctx: Where) -> tuple[SourceSpec, ...]:
    out = []
    for name in names:
        if name not in sources:
            ctx.fail("undefined-source", f"source {name!r} is not defined in [sources]"
                     f" (defined: {', '.join(sorted(sources)) or 'none'})")
        out.append(sources[name])
    return tuple(out)


def entries_of(raw: Any, kind: str, file: str, keys: set[str],
               required: set[str]) -> Iterator[tuple[int, dict[str, Any], Where]]:
    """The tables of a ``[[kind]]`` array, each checked for its keys, with where its problems are reported."""
    if not isinstance(raw, list):
        Where(file).fail("bad-type", f"[[{kind}]] must be an array of tables")
    for index, entry in enumerate(raw):
        ctx = Where(file, _entry_label(kind, index, entry))
        if not isinstance(entry, dict):
            ctx.fail("bad-type", f"each [[{kind}]] must be a table")
        check_keys(entry, keys, required, ctx)
        yield index, entry, ctx


def _entry_label(kind: str, index: int, entry: Any) -> str:
    """How errors name a [[rule]]/[[modifier]]/[[suggestion]]: by id when it has one, always by position."""
    if isinstance(entry, dict) and isinstance(entry.get("id"), str):
        return f"{kind} '{entry['id']}' (#{index + 1})"
    return f"{kind} #{index + 1}"


def _load_rule(entry: Any, index: int, engine: Engine, gpus: GpuTable, modifier: bool = False,
               placeholders: tuple[str, ...] = PLACEHOLDERS) -> Rule:
    kind = "modifier" if modifier else "rule"
    ctx = Where(engine.file, _entry_label(kind, index, entry))
    if not isinstance(entry, dict):
        ctx.fail("bad-type", f"[[{kind}]] entries must be tables")
    check_keys(entry, MODIFIER_KEYS if modifier else RULE_KEYS, {"id"} if modifier else {"id", "status"}, ctx)
    ident = require_str(entry, "id", ctx)
    if not _RULE_ID.match(ident):
        ctx.fail("bad-id", f"{kind} id {ident!r} must be lower case letters, digits, '.', '_' or '-'")
    when: list[str] = []
    if modifier:
        status: Any = "modifier"  # a rule's status is read from the file below (checked against STATUSES)
        when = _str_list(entry, "when", ctx) if "when" in entry else ["native", "fallback"]
        for w in when:
            if w not in STATUSES:
                ctx.fail("bad-status", f"when: {w!r} is not one of {', '.join(STATUSES)}")
        if not any(k in entry for k in ("requires", "reasons", "warnings")):
            ctx.fail("missing-key", "a modifier must add 'requires', 'reasons' or 'warnings'")
    else:
        status = entry.get("status")
        if status not in STATUSES:
            ctx.fail("bad-status", f"status {status!r} is not one of {', '.join(STATUSES)}")
    versions_text = None
    versions = None
    if "versions" in entry:
        versions_text = require_str(entry, "versions", ctx)
        try:
            versions = parse_specifier(versions_text, engine.scheme)
        except ValueError as exc:
            ctx.fail("bad-version-spec", f"versions: {exc}")
    verified = _verified(entry, engine, versions, versions_text, modifier, ctx)
    gate = entry.get("gate", False)
    if not isinstance(gate, bool) or (gate and status != "unsupported"):
        ctx.fail("bad-type", "gate must be true or false, and only an 'unsupported' rule is a gate")
    methods = _methods(entry, ctx)
    match = compile_match(entry.get("match", {}), ctx.fail) if "match" in entry else ()
    if "hardware" in entry:
        if not engine.needs_gpu:
            ctx.fail("hardware-on-provider", "provider rules are judged without a GPU: remove 'hardware'")
        hardware = compile_hardware(entry["hardware"], ctx.fail, gpus.arch_ids(), gpus.gpu_ids())
    else:
        hardware = ()
    backends = _backends(entry, engine, ctx)
    kernel = None if modifier else entry.get("kernel")
    if kernel is not None and (not isinstance(kernel, str) or not kernel.strip()):
        ctx.fail("bad-type", "kernel must be a non-empty string")
    requires = tuple(_str_list(entry, "requires", ctx, allow_empty=True)) if "requires" in entry else ()
    reasons = tuple(_str_list(entry, "reasons", ctx, allow_empty=True)) if "reasons" in entry else ()
    warnings, warnings_if = _warnings(entry.get("warnings", []), ctx)
    if status in ("unknown", "unsupported", "fallback") and not reasons:
        ctx.fail("missing-reason", f"a '{status}' rule must say why in 'reasons'")
    if status == "fallback" and not kernel:
        ctx.fail("missing-kernel", "a 'fallback' rule must name the substitute path in 'kernel'")
    for text in (kernel or "", *requires, *reasons, *warnings, *(t for t, _ in warnings_if)):
        _check_placeholders(text, placeholders, ctx)
    if "sources" not in entry or not entry["sources"]:
        ctx.fail("missing-source", f"every {kind} must name at least one source from [sources]")
    sources = _resolve_sources(_str_list(entry, "sources", ctx), engine.sources, ctx)
    priority = entry.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        ctx.fail("bad-type", "priority must be an integer")
    loaded_as = entry.get("weights_loaded_as")
    if loaded_as is not None and (loaded_as not in LOADED_DTYPES or status not in ("native", "fallback")):
        ctx.fail("bad-type", f"weights_loaded_as must be one of {', '.join(LOADED_DTYPES)}, on a rule that runs "
                             "the checkpoint")
    return Rule(id=ident, file=engine.file, index=index, versions=versions, versions_text=versions_text,
                methods=methods, match=match, hardware=hardware, backends=backends, status=status,
                kernel=kernel, requires=requires, reasons=reasons, warnings=warnings, sources=sources,
                priority=priority, modifier=modifier, when=frozenset(when), weights_loaded_as=loaded_as,
                verified=verified, gate=gate, warnings_if=warnings_if)


def _verified(entry: dict[str, Any], engine: Engine, versions: SpecifierSet | None, versions_text: str | None,
              modifier: bool, ctx: Where) -> Verified | None:
    """A rule's ``verified``: the releases it was read at, within its ``versions``; required (except on modifiers)
    in a file with ``[engine] rules_verified = true``."""
    if "verified" not in entry:
        if engine.rules_verified and not modifier:
            ctx.fail("missing-verified", "every rule must state the releases it was read at: verified = [\"0.33.0\", "
                                         "...] or a closed range such as \">=0.14.0,<=0.28.0\"")
        return None
    try:
        verified = parse_verified(entry["verified"], engine.scheme)
    except ValueError as exc:
        ctx.fail("bad-verified", f"verified: {exc}")
    if versions is not None:
        ends = [*verified.exact, *(parse_version(s.version, engine.scheme) for spec in verified.ranges
                                   for s in spec if s.operator in ("==", ">=", "<="))]
        outside = sorted(str(v) for v in ends if not contains(versions, v))
        if outside:
            ctx.fail("bad-verified", f"verified names {', '.join(outside)}, outside the rule's versions "
                                     f"{versions_text!r}: a rule says nothing about releases it does not cover")
    return verified


def _warnings(raw: Any, ctx: Where) -> tuple[tuple[str, ...], tuple[tuple[str, tuple[MatchCondition, ...]], ...]]:
    """A rule's ``warnings``: strings said whenever the rule decides, and ``{ text, match }`` tables said only to
    checkpoints the ``match`` holds for (a warning about some models must not reach the others)."""
    items = raw if isinstance(raw, list) else [raw]
    plain: list[str] = []
    conditional: list[tuple[str, tuple[MatchCondition, ...]]] = []
    for item in items:
        if isinstance(item, dict):
            check_keys(item, {"text", "match"}, {"text", "match"}, ctx)
            text = item["text"]
            if not isinstance(text, str) or not text.strip():
                ctx.fail("bad-type", "a warning's 'text' must be a non-empty string")
            conditional.append((text, compile_match(item["match"], ctx.fail)))
        elif isinstance(item, str) and item.strip():
            plain.append(item)
        else:
            ctx.fail("bad-type", f"'warnings' items must be strings or {{ text, match }} tables, not {item!r}")
    return tuple(plain), tuple(conditional)


def _load_suggestions(raw: Any, display: str, engine_id: str | None, sources: dict[str, SourceSpec],
                      gpus: GpuTable, engine: Engine | None) -> list[SuggestionRule]:
    if not isinstance(raw, list):
        Where(display).fail("bad-type", "[[suggestion]] must be an array of tables")
    out: list[SuggestionRule] = []
    seen: set[str] = set()
    for index, entry in enumerate(raw):
        ctx = Where(display, _entry_label("suggestion", index, entry))
        if not isinstance(entry, dict):
            ctx.fail("bad-type", "[[suggestion]] entries must be tables")
        check_keys(entry, SUGGESTION_KEYS, {"id", "text", "sources"}, ctx)
        ident = require_str(entry, "id", ctx)
        if not _RULE_ID.match(ident):
            ctx.fail("bad-id", f"suggestion id {ident!r} must be lower case letters, digits, '.', '_' or '-'")
        if ident in seen:
            ctx.fail("duplicate-rule-id", f"suggestion id {ident!r} is used twice")
        seen.add(ident)
        when = _str_list(entry, "when", ctx) if "when" in entry else ["fallback", "unsupported", "unknown"]
        for status in when:
            if status not in STATUSES:
                ctx.fail("bad-status", f"when: {status!r} is not one of {', '.join(STATUSES)}")
        text = require_str(entry, "text", ctx)
        command = entry.get("command") or None
        if command is not None and not isinstance(command, str):
            ctx.fail("bad-type", "command must be a string")
        for t in (text, command or ""):
            _check_placeholders(t, SUGGESTION_PLACEHOLDERS, ctx)
        versions = None
        if "versions" in entry:
            if engine is None:
                ctx.fail("unknown-key", "'versions' is only allowed in an engine file's suggestions")
            try:
                versions = parse_specifier(require_str(entry, "versions", ctx), engine.scheme)
            except ValueError as exc:
                ctx.fail("bad-version-spec", f"versions: {exc}")
        if engine is not None and not engine.needs_gpu and "hardware" in entry:
            ctx.fail("hardware-on-provider", "provider suggestions are judged without a GPU: remove 'hardware'")
        out.append(SuggestionRule(
            id=ident, file=display, engine=engine_id, methods=_methods(entry, ctx), versions=versions,
            when=frozenset(when),
            match=compile_match(entry["match"], ctx.fail) if "match" in entry else (),
            hardware=compile_hardware(entry["hardware"], ctx.fail, gpus.arch_ids(), gpus.gpu_ids())
            if "hardware" in entry else (),
            backends=_backends(entry, engine, ctx),
            text=text, command=command,
            sources=_resolve_sources(_str_list(entry, "sources", ctx), sources, ctx),
        ))
    return out


def _methods(entry: dict[str, Any], ctx: Where) -> frozenset[str] | None:
    if "methods" not in entry:
        return None
    methods = _str_list(entry, "methods", ctx)
    for m in methods:
        if m not in REGISTRY:  # the live registry: a format registered at run time is canonical too
            ctx.fail("unknown-method", f"method {m!r} is not canonical (known: {', '.join(REGISTRY.methods())})")
    return frozenset(methods)


def _backends(entry: dict[str, Any], engine: Engine | None, ctx: Where) -> frozenset[str] | None:
    if "backend" not in entry:
        return None
    names = _str_list(entry, "backend", ctx)
    known = engine.backends if engine is not None else {}
    for name in names:
        if name not in known:
            ctx.fail("unknown-backend", f"backend {name!r} is not in [engine] backends "
                     f"(defined: {', '.join(known) or 'none'})")
    return frozenset(names)


def _check_placeholders(text: str, allowed: tuple[str, ...], ctx: Where) -> None:
    for name in _PLACEHOLDER.findall(text):
        if name not in allowed:
            ctx.fail("bad-placeholder", f"placeholder {{{name}}} in {text!r} is not one of "
                     f"{', '.join('{' + p + '}' for p in allowed)}")


def _str_list(entry: dict[str, Any], key: str, ctx: Where, allow_empty: bool = False) -> list[str]:
    value = entry.get(key)
    items = value if isinstance(value, list) else [value]
    if (not items and not allow_empty) or not all(isinstance(v, str) and v.strip() for v in items):
        ctx.fail("bad-type", f"{key!r} must be a string or a{'' if allow_empty else ' non-empty'} list of strings, "
                 f"not {value!r}")
    return list(items)
