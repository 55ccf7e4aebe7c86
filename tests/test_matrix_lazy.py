"""Load only what a request needs: a check reads the GPU table, the shared suggestions and the engine files it
judges; every file is still validated when it is used and by ``qcheck matrix --validate``; the parsed-file cache
(qcheck/datacache.py) is keyed on the files' bytes and never answers for bytes it was not made from."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from qcheck import datacache
from qcheck.cli import main
from qcheck.data import data_dir
from qcheck.matrix import files
from qcheck.matrix.loader import clear_cache, load_matrix
from qcheck.matrix.schema import MatrixDataError
from support import cache_entries

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
GGUF = ROOT / "examples" / "tiny-llama-Q4_0.gguf"
SHIPPED = data_dir("matrices")


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every matrix file read in this test, as ``engines/vllm.toml`` (a fresh process's view: nothing loaded)."""
    seen: list[str] = []
    original = files.read_toml

    def counting(root: Path, file: Path) -> dict:
        seen.append(file.relative_to(root).as_posix())
        return original(root, file)

    monkeypatch.setattr(files, "read_toml", counting)
    clear_cache()
    yield seen
    clear_cache()


@pytest.fixture
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("QCHECK_CACHE_DIR", str(folder))
    monkeypatch.delenv("QCHECK_CACHE", raising=False)
    return folder / "data"


@pytest.fixture
def qcheck(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str]]:
    """Run the real command line in this process: (exit code, stdout + stderr)."""

    def run(*args: str) -> tuple[int, str]:
        with pytest.raises(SystemExit) as done:
            main(list(args))
        out = capsys.readouterr()
        return int(done.value.code or 0), out.out + out.err

    return run


def engine_files(seen: list[str]) -> list[str]:
    return [f for f in seen if f.startswith("engines/")]


@pytest.mark.parametrize(("spelling", "engine"), [("vllm", "vllm"), ("vLLM", "vllm"), ("llama.cpp", "llama.cpp"),
                                                  ("LLAMA.CPP", "llama.cpp"), ("Ollama", "ollama")])
def test_a_check_reads_only_the_judged_engine_file(reads: list[str], qcheck: Callable[..., tuple[int, str]],
                                                  spelling: str, engine: str) -> None:
    """An engine's id (any case or punctuation) is found from the file names: a check whose answer is "runs"
    reads one engine file."""
    code, out = qcheck("check", str(GGUF), "--engine", spelling, "--gpu", "hopper")
    assert code == 0 and "NATIVE" in out, out
    assert engine_files(reads) == [f"engines/{engine}.toml"]
    assert {"gpus.toml", "suggestions.toml"} <= set(reads)
    assert load_matrix().engines.loaded() == [engine]


def test_a_check_that_fails_asks_the_other_engines_for_a_way_out(reads: list[str],
                                                                 qcheck: Callable[..., tuple[int, str]]) -> None:
    """TensorRT-LLM does not run GGUF: the answer names the engines that do, so they are read then (and only
    then); the engine's own file is read first and once."""
    code, out = qcheck("check", str(GGUF), "--engine", "TensorRT_LLM", "--gpu", "hopper")
    assert code == 1 and "UNSUPPORTED" in out and "--engine llama.cpp" in out, out
    assert engine_files(reads)[0] == "engines/tensorrt-llm.toml"
    assert len(engine_files(reads)) == len(set(engine_files(reads)))


def test_an_alias_reads_every_engine_table_but_validates_one(reads: list[str]) -> None:
    """``trtllm`` is an alias: every file's [engine] table is read to find it (and to check that no two engines
    claim a name), and only TensorRT-LLM's file is validated and compiled."""
    matrix = load_matrix()
    assert matrix.engine("trtllm").id == "tensorrt-llm"
    assert sorted(engine_files(reads)) == sorted(f"engines/{e}.toml" for e in matrix.engines)
    assert matrix.engines.loaded() == ["tensorrt-llm"]


def test_explore_mode_loads_every_engine(reads: list[str], qcheck: Callable[..., tuple[int, str]]) -> None:
    code, out = qcheck("check", str(GGUF), "--gpu", "hopper")  # no --engine: every engine that runs on the GPU's vendor
    assert code in (0, 1), out
    matrix = load_matrix()
    assert sorted(matrix.engines.loaded()) == sorted(matrix.engines) and len(matrix.engines) >= 15
    assert len(engine_files(reads)) == len(matrix.engines)  # each file read once


def test_iterating_ids_reads_nothing(reads: list[str]) -> None:
    matrix = load_matrix()
    assert "vllm" in matrix.engines and "nope" not in matrix.engines
    assert len(list(matrix.engines)) == len(matrix.engines)
    assert engine_files(reads) == [] and matrix.engines.loaded() == []


# ------------------------------------------------------------------------------------- broken engine files
def broken_copy(tmp_path: Path, engine: str, edit: str) -> Path:
    root = tmp_path / "matrices"
    shutil.copytree(SHIPPED, root)
    path = root / "engines" / f"{engine}.toml"
    text = path.read_text(encoding="utf-8")
    if edit == "unknown-key":
        text = text.replace("[[rule]]\n", "[[rule]]\nstatuss = \"native\"\n", 1)
    elif edit == "toml-syntax":
        text += "\n[[rule]\n"
    elif edit == "bad-status":
        text = text.replace('status = "native"', 'status = "works"', 1)
    path.write_text(text, encoding="utf-8")
    return root


@pytest.fixture
def run_cli(qcheck: Callable[..., tuple[int, str]], monkeypatch: pytest.MonkeyPatch) -> Callable[..., tuple[int, str]]:
    """The command line on the matrix directory ``root`` (``$QCHECK_MATRICES``), each run a fresh load."""

    def run(root: Path, *args: str) -> tuple[int, str]:
        monkeypatch.setenv("QCHECK_MATRICES", str(root))
        clear_cache()
        try:
            return qcheck(*args)
        finally:
            clear_cache()

    return run


@pytest.mark.parametrize("edit", ["unknown-key", "toml-syntax", "bad-status"])
def test_a_broken_engine_file_is_refused_when_used_and_by_validate(tmp_path: Path, edit: str,
                                                                   run_cli: Callable[..., tuple[int, str]]) -> None:
    root = broken_copy(tmp_path, "vllm", edit)
    code, out = run_cli(root, "check", str(GGUF), "--engine", "vllm", "--gpu", "hopper")
    assert code == 2 and "matrix data error: matrices/engines/vllm.toml" in out and f"[{edit}]" in out, out
    code, out = run_cli(root, "matrix", "--validate")
    assert code == 2 and "matrix data error: matrices/engines/vllm.toml" in out and f"[{edit}]" in out, out
    # an engine that is not asked about does not read vllm.toml: its answer is still given
    code, out = run_cli(root, "check", str(GGUF), "--engine", "llama.cpp", "--gpu", "hopper")
    assert code in (0, 1) and "matrix data error" not in out, out
    # explore mode asks every engine, so it meets the broken file
    code, out = run_cli(root, "check", str(GGUF), "--gpu", "hopper")
    assert code == 2 and "engines/vllm.toml" in out, out


def test_a_name_claimed_by_two_engines_is_refused_when_names_are_looked_up(
        tmp_path: Path, run_cli: Callable[..., tuple[int, str]]) -> None:
    root = tmp_path / "matrices"
    shutil.copytree(SHIPPED, root)
    path = root / "engines" / "sglang.toml"
    path.write_text(path.read_text(encoding="utf-8").replace('name = "SGLang"', 'name = "SGLang"\naliases = ["trtllm"]',
                                                             1), encoding="utf-8")
    code, out = run_cli(root, "check", str(GGUF), "--engine", "trtllm", "--gpu", "hopper")
    assert code == 2 and "[duplicate-name]" in out and "'trtllm'" in out, out
    code, out = run_cli(root, "matrix", "--validate")
    assert code == 2 and "[duplicate-name]" in out, out


# ------------------------------------------------------------------------------------------ the data cache
def test_every_shipped_file_survives_the_cache_unchanged() -> None:
    """The cache stores a parse as JSON: for every shipped TOML file the round trip gives the parse back exactly,
    so the schema validation sees the same data from the cache as from the file."""
    for path in sorted(SHIPPED.rglob("*.toml")):
        parsed = tomllib.loads(path.read_text(encoding="utf-8"))
        assert json.loads(json.dumps(parsed)) == parsed, path


def test_a_cached_parse_is_used_for_the_same_bytes_only(copy: Path, private_cache: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    root = copy
    parses: list[str] = []
    original = files._parse

    def counting(r: Path, file: Path, data: bytes) -> dict:
        parses.append(file.name)
        return original(r, file, data)

    monkeypatch.setattr(files, "_parse", counting)
    vllm = root / "engines" / "vllm.toml"
    first = files.read_toml(root, vllm)
    assert parses == ["vllm.toml"] and len(list(private_cache.glob("toml-*.json"))) == 1
    assert files.read_toml(root, vllm) == first and parses == ["vllm.toml"]  # the second read: no parse
    # an edit is a new key: parsed again, and the answer is the file's
    vllm.write_text(vllm.read_text(encoding="utf-8").replace('name = "vLLM"', 'name = "vLLM edited"'),
                    encoding="utf-8")
    assert files.read_toml(root, vllm)["engine"]["name"] == "vLLM edited" and parses == ["vllm.toml"] * 2
    # the validated engine from a cached parse is the one from a fresh parse
    clear_cache()
    cached = load_matrix(root).engine("vllm")
    monkeypatch.setenv("QCHECK_CACHE", "off")
    clear_cache()
    fresh = load_matrix(root).engine("vllm")
    clear_cache()
    assert cached == fresh and cached.name == "vLLM edited"


def entry_of(private_cache: Path, path: Path) -> Path:
    return private_cache / f"toml-{datacache.key_of('toml', path.read_bytes())}.json"


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """A copy of the shipped matrix directory."""
    root = tmp_path / "matrices"
    shutil.copytree(SHIPPED, root)
    return root


def read_once(root: Path, name: str, private_cache: Path) -> tuple[Path, Path]:
    """Read ``root/name`` through the cache: (the file, its cache entry)."""
    path = root / name
    files.read_toml(root, path)
    return path, entry_of(private_cache, path)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "other-key", "other-kind", "old-format", "not-a-table",
                                    "deep"])
def test_a_damaged_or_foreign_entry_is_a_miss(copy: Path, private_cache: Path, damage: str) -> None:
    gpus, entry = read_once(copy, "gpus.toml", private_cache)
    expected = tomllib.loads(gpus.read_text(encoding="utf-8"))
    good = cache_entries.read(entry)
    bad = {"garbage": "{{{ not json", "truncated": json.dumps(good)[:100],
           "other-key": json.dumps({**good, "key": "0" * 64}), "other-kind": json.dumps({**good, "kind": "gguf"}),
           "old-format": json.dumps({**good, "format": 0}),
           "not-a-table": json.dumps({**good, "value": ["a", "list"]}),
           "deep": "[" * 100_000 + "]" * 100_000}[damage]
    cache_entries.write(entry, bad)  # signed with the key: what the entry holds is still checked
    assert files.read_toml(copy, gpus) == expected


def test_an_entry_with_the_right_key_answers_only_for_those_bytes(copy: Path, private_cache: Path) -> None:
    """The key is the SHA-256 of the bytes: whatever an entry says, a file whose bytes differ never reads it."""
    suggestions, entry = read_once(copy, "suggestions.toml", private_cache)
    suggestions.write_text(suggestions.read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")
    assert not entry_of(private_cache, suggestions).exists()
    assert files.read_toml(copy, suggestions) == tomllib.loads(suggestions.read_text(encoding="utf-8"))
    assert entry.exists()  # the old entry stays (pruned later), unused


def test_no_cache_in_a_directory_others_may_write(copy: Path, private_cache: Path) -> None:
    gpus, entry = read_once(copy, "gpus.toml", private_cache)
    cache_entries.write(entry, {**cache_entries.read(entry), "value": {"arch": []}})
    assert files.read_toml(copy, gpus) == {"arch": []}  # (a planted entry in a private folder is believed ...)
    os.chmod(private_cache, 0o777)
    assert files.read_toml(copy, gpus) == tomllib.loads(gpus.read_text(encoding="utf-8"))  # (... a shared one not)
    assert stat.S_IMODE(private_cache.stat().st_mode) == 0o777


def test_entries_are_written_whole_and_the_cache_can_be_off(tmp_path: Path, private_cache: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    clear_cache()
    load_matrix(SHIPPED).engine("vllm")
    clear_cache()
    written = sorted(p.name for p in private_cache.iterdir())
    assert written and all(n.startswith("toml-") and n.endswith(".json") for n in written)  # no temporary files
    assert stat.S_IMODE(private_cache.stat().st_mode) == 0o700
    shutil.rmtree(private_cache)
    monkeypatch.setenv("QCHECK_CACHE", "off")
    load_matrix(SHIPPED).engine("vllm")
    clear_cache()
    assert not private_cache.exists()


def test_old_entries_are_pruned(private_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(datacache, "MAX_ENTRIES", 5)
    for i in range(12):
        datacache.store("toml", f"{i:064x}", {"i": i})
    names = sorted(p.name for p in private_cache.iterdir())
    assert len(names) == 5
    assert datacache.load("toml", f"{11:064x}") == {"i": 11}


def test_an_unreadable_cache_never_fails_a_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache directory is a file: nothing can be stored or read, and the matrix still loads."""
    blocker = tmp_path / "blocked"
    blocker.write_text("not a directory", encoding="utf-8")
    monkeypatch.setenv("QCHECK_CACHE_DIR", str(blocker))
    monkeypatch.delenv("QCHECK_CACHE", raising=False)
    clear_cache()
    try:
        assert load_matrix(SHIPPED).engine("vllm").id == "vllm"
    finally:
        clear_cache()
    with pytest.raises(MatrixDataError):  # and a broken file is still an error, cache or not
        files.read_toml(tmp_path, _write(tmp_path / "bad.toml", "x = \n"))


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path
