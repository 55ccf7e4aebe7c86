"""Red-team round 3 (issue #32, item 7): the data cache cannot be forged by whoever can write its directory (a CI
cache restored from another job), and what an entry holds is validated as strictly as a header. Through the real
CLI with the cache on, in a directory of the test; the key (``qcheck/cache_auth.py``, the one key of every qcheck
cache) lives in a folder beside it.

Each forged entry is planted in every layout an attacker could try: plain JSON (the layout before entries were
tagged), a tag line without the key, and the tag of another entry (replayed). Entries signed with the key itself
(``support.cache_entries``) test the validation behind the tag.
"""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path
from typing import Any

import pytest

from support.gate_helpers import mxfp4_dir, qcheck

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
FORGERIES = ("plain", "no-key", "replayed")


def _env(tmp_path: Path) -> dict[str, str]:
    return {"QCHECK_CACHE": "on", "QCHECK_CACHE_DIR": str(tmp_path / "cache"),
            "QCHECK_CACHE_KEY_FILE": str(tmp_path / "state" / "cache-key")}


def _body(path: Path) -> dict[str, Any]:
    """The JSON of an entry, with or without a tag line."""
    raw = path.read_bytes()
    first, newline, rest = raw.partition(b"\n")
    return json.loads(rest if newline and re.fullmatch(rb"[0-9a-f]{64}", first) else raw)  # type: ignore[no-any-return]


def _plant(path: Path, entry: dict[str, Any], how: str, donor: Path | None = None) -> None:
    body = json.dumps(entry).encode()
    if how == "plain":
        path.write_bytes(body)
    elif how == "no-key":
        path.write_bytes(b"0" * 64 + b"\n" + body)
    elif how == "replayed":  # a valid tag, made by the key for another entry
        assert donor is not None and donor != path
        path.write_bytes(donor.read_bytes().partition(b"\n")[0] + b"\n" + body)
    else:  # signed with this test's key (tmp_path/state/cache-key), as qcheck would sign it
        from qcheck import cache_auth, datacache

        kind, key = path.stem.rsplit("-", 1)
        secret = bytes.fromhex((path.parents[2] / "state" / "cache-key").read_text().strip())
        tag = cache_auth.sign(secret, datacache.entry_context(kind, key), body)
        path.write_bytes(tag.encode() + b"\n" + body)


@pytest.mark.parametrize("how", FORGERIES)
def test_an_edited_matrix_entry_cannot_flip_a_verdict(how: str, tmp_path: Path) -> None:
    """The parse of the engine's TOML, edited to add a rule that makes MXFP4 native (key and name kept): still
    UNKNOWN, as the file says."""
    model = mxfp4_dir(tmp_path / "mx")
    env = _env(tmp_path)
    args = ("check", str(model), "--engine", "fastserve", "--gpu", "h100", "--json")
    first = qcheck(*args, **env)
    assert json.loads(first.stdout)["verdicts"][0]["status"] == "unknown", first.stderr
    entries = sorted((tmp_path / "cache" / "data").glob("toml-*.json"))
    engine = next(p for p in entries if _body(p)["value"].get("engine", {}).get("id") == "fastserve")
    donor = next(p for p in entries if p != engine)
    entry = _body(engine)
    entry["value"]["rule"].insert(0, {"id": "forged", "methods": ["mxfp4"], "status": "native",
                                      "kernel": "forged kernel", "sources": ["platforms"]})
    _plant(engine, entry, how, donor)
    again = qcheck(*args, **env)
    verdict = json.loads(again.stdout)["verdicts"][0]
    assert verdict["status"] == "unknown" and "forged" not in again.stdout, verdict
    key = tmp_path / "state" / "cache-key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(bytes.fromhex(key.read_text().strip())) == 32
    assert not str(key).startswith(str(tmp_path / "cache"))


def _gguf_entry(tmp_path: Path, env: dict[str, str]) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """A GGUF inspected through the cache: its header entry, the entry's JSON and the uncached inspection."""
    model = tmp_path / "tiny.gguf"
    model.write_bytes((EXAMPLES / "tiny-llama-Q4_0.gguf").read_bytes())
    fresh = json.loads(qcheck("inspect", str(model), "--json", QCHECK_CACHE="off").stdout)
    assert qcheck("inspect", str(model), "--json", **env).returncode == 0
    [entry_path] = (tmp_path / "cache" / "data").glob("gguf-header-*.json")
    return entry_path, _body(entry_path), fresh


@pytest.mark.parametrize("how", [*FORGERIES, "signed"])
@pytest.mark.parametrize("damage", ["nested-900", "negative-shape", "zero-dimension", "huge-count", "bad-size"])
def test_a_hostile_header_entry_is_a_miss(damage: str, how: str, tmp_path: Path) -> None:
    """A metadata value nested 900 levels (was an internal RecursionError), tensor shapes with a negative or zero
    dimension (printed negative parameter counts), an array summary of 2^62 elements, a byte size that is not
    the dtype's: a miss whether the entry is forged or even signed; the file is parsed and reported as it is."""
    env = _env(tmp_path)
    entry_path, entry, fresh = _gguf_entry(tmp_path, env)
    value = entry["value"]
    tensors = value["tensors"]
    if damage == "nested-900":
        nested: Any = "x"
        for _ in range(900):
            nested = [nested]
        value["metadata"]["general.name"] = nested
    elif damage == "negative-shape":
        tensors[0][2] = [-tensors[0][2][0], *tensors[0][2][1:]]
    elif damage == "zero-dimension":
        tensors[0][2] = [0, *tensors[0][2][1:]]
    elif damage == "huge-count":
        value["metadata"]["tokenizer.ggml.tokens"] = {"array_of": "STRING", "count": 2**62, "offset": 8}
    else:
        tensors[0][3] += 32
    donor = next(p for p in (tmp_path / "cache" / "data").glob("*.json") if p != entry_path)
    _plant(entry_path, entry, how, donor)
    res = qcheck("inspect", str(tmp_path / "tiny.gguf"), "--json", **env)
    assert res.returncode == 0 and "internal error" not in res.stderr, res.stderr
    data = json.loads(res.stdout)
    assert data["parameters"] == fresh["parameters"] > 0
    assert data == fresh  # the file as it is: every field


def test_a_key_others_can_read_or_a_symlinked_key_is_not_used(tmp_path: Path) -> None:
    """The key must be this user's alone: group-readable, or a symlink, and the cache is neither read nor
    written (never an error)."""
    env = _env(tmp_path)
    model = mxfp4_dir(tmp_path / "mx")
    args = ("check", str(model), "--engine", "fastserve", "--gpu", "h100", "--json")
    assert qcheck(*args, **env).returncode == 1
    key = tmp_path / "state" / "cache-key"
    key.chmod(0o640)
    for entry in (tmp_path / "cache" / "data").glob("*.json"):
        entry.unlink()
    assert qcheck(*args, **env).returncode == 1
    assert not list((tmp_path / "cache" / "data").glob("*.json"))  # nothing signed with a key others can read
    key.chmod(0o600)
    moved = tmp_path / "elsewhere.key"
    key.rename(moved)
    key.symlink_to(moved)
    assert qcheck(*args, **env).returncode == 1
    assert not list((tmp_path / "cache" / "data").glob("*.json"))


def test_a_signed_entry_is_used(tmp_path: Path) -> None:
    """The control of the tests above: an entry signed with the key and valid is what qcheck reports (a planted
    warning shows up), so the damaged ones were refused by their validation, not by accident."""
    env = _env(tmp_path)
    entry_path, entry, _fresh = _gguf_entry(tmp_path, env)
    entry["value"]["warnings"] = ["planted by the test"]
    _plant(entry_path, entry, "signed")
    data = json.loads(qcheck("inspect", str(tmp_path / "tiny.gguf"), "--json", **env).stdout)
    assert "planted by the test" in data["warnings"]
    _plant(entry_path, entry, "no-key")
    data = json.loads(qcheck("inspect", str(tmp_path / "tiny.gguf"), "--json", **env).stdout)
    assert "planted by the test" not in data["warnings"]
