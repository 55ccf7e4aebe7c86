"""The verifiers under matrices/tools/ run against small fixtures (no network): the logic that reads a released
package must find exactly what a hand-built file holds, and report a disagreement with the TOML."""

from __future__ import annotations

import importlib.util
import struct
import sys
import zipfile
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

TOOLS = Path(__file__).resolve().parent.parent / "matrices" / "tools"


def load_tool(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"qcheck_tool_{name}", TOOLS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def fatbin(entries: list[tuple[int, int]]) -> bytes:
    """One fatbinary: header + entries (kind, sm), each with a 64-byte entry header and a 16-byte payload."""
    body = b""
    for kind, arch in entries:
        head = struct.pack("<HHIQ", kind, 0x0101, 64, 16) + struct.pack("<IIHH", 0, 0, 0, 0) + struct.pack("<I", arch)
        body += head.ljust(64, b"\0") + b"\xaa" * 16
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def elf_with(sections: dict[str, bytes]) -> bytes:
    """A minimal ELF64 LE file holding the named sections (plus .shstrtab), enough for section lookup."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n in [*sections, ".shstrtab"])
    blobs, offsets, pos = [], [], 64
    for data in [*sections.values(), names]:
        offsets.append(pos)
        blobs.append(data)
        pos += len(data)
    shoff = (pos + 7) // 8 * 8
    headers = [b"\0" * 64]  # the null section
    name_pos = 1
    for (name, data), off in zip([*sections.items(), (".shstrtab", names)], offsets, strict=True):
        headers.append(struct.pack("<IIQQQQIIQQ", name_pos, 1, 0, 0, off, len(data), 0, 0, 8, 0))
        name_pos += len(name) + 1
    ident = b"\x7fELF" + bytes([2, 1, 1]) + b"\0" * 9
    header = ident + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, len(headers),
                                 len(headers) - 1)
    out = header + b"".join(blobs)
    return out.ljust(shoff, b"\0") + b"".join(headers)


@pytest.fixture(scope="module")
def cuda() -> ModuleType:
    return load_tool("verify_cuda_build")


ENTRIES = [(2, 75)] * 6 + [(2, 80)] * 5 + [(1, 80)] * 5 + [(2, 120)] * 7 + [(2, 52)] + [(1, 52)] + [(1, 89)]


def test_fatbinary_entries_are_counted_per_kind_and_capability(cuda, tmp_path: Path) -> None:
    lib = elf_with({".text": b"\x90" * 24, ".nv_fatbin": fatbin(ENTRIES[:12]) + b"\0" * 8 + fatbin(ENTRIES[12:])})
    found = cuda.read_library(lib)
    assert found == Counter({("sass", "7.5"): 6, ("sass", "8.0"): 5, ("ptx", "8.0"): 5, ("sass", "12.0"): 7,
                             ("sass", "5.2"): 1, ("ptx", "5.2"): 1, ("ptx", "8.9"): 1})
    # a lone kernel does not make a generation usable
    assert cuda.architectures(found) == (["7.5", "8.0", "12.0"], ["8.0"])
    path = tmp_path / "_C.abi3.so"
    path.write_bytes(lib)
    assert cuda.main(["--so", str(path)]) == 0


def test_wheel_libraries_are_summed_and_compared_with_the_toml(cuda, tmp_path: Path) -> None:
    wheel = tmp_path / "vllm-9.9.9-cp38-abi3-manylinux_2_31_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("vllm/_C.abi3.so", elf_with({".nv_fatbin": fatbin([(2, 75)] * 3 + [(2, 90)] * 5)}))
        zf.writestr("vllm/_C_stable_libtorch.abi3.so", elf_with({".nv_fatbin": fatbin([(2, 75)] * 3)}))
        zf.writestr("vllm/other.so", elf_with({".nv_fatbin": fatbin([(2, 70)] * 9)}))  # not an engine library
    sass, ptx = cuda.architectures(cuda.read_wheel(wheel, cuda.LIBRARIES["vllm"]))
    assert (sass, ptx) == (["7.5", "9.0"], [])
    assert cuda.compare({"cuda_sass": ["9.0", "7.5"]}, sass, ptx) == []
    assert cuda.compare({"cuda_sass": ["7.0", "7.5", "9.0"], "cuda_ptx": ["8.0"]}, sass, ptx) == [
        "cuda_sass: the TOML lists ['7.0', '7.5', '9.0'], the package has ['7.5', '9.0']",
        "cuda_ptx: the TOML lists ['8.0'], the package has []"]
    assert cuda.compare(None, sass, ptx) == ["no [[build]] entry covers this version"]


def test_shipped_vllm_build_entries_cover_the_versions_read(cuda) -> None:
    assert cuda.toml_build("vllm", "0.19.1")["cuda_sass"][0] == "7.0"
    assert "7.0" not in cuda.toml_build("vllm", "0.20.0")["cuda_sass"]
    assert cuda.toml_build("vllm", "0.12.0") is None


def test_build_claims_compare_each_library_of_a_dependency_wheel(cuda, tmp_path: Path) -> None:
    wheel = tmp_path / "dep-1.0-py3-none-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("dep/lib_cu12.so", elf_with({".nv_fatbin": fatbin([(2, 60)] * 5 + [(2, 90)] * 5)}))
        zf.writestr("dep/lib_cu13.so", elf_with({".nv_fatbin": fatbin([(2, 75)] * 5 + [(1, 90)] * 5)}))
    claims_file = tmp_path / "claims.toml"
    claims_file.write_text(
        '[[build_claim]]\nrules = ["r"]\npackage = "dep"\nversion = "1.0"\nlibraries = ["dep/lib_cu12.so"]\n'
        'sass = ["6.0", "9.0"]\nptx = []\n\n'
        '[[build_claim]]\nrules = ["r"]\npackage = "dep"\nversion = "1.0"\nlibraries = ["dep/lib_cu13.so"]\n'
        'sass = ["6.0", "7.5"]\nptx = ["9.0"]\n')
    claims = cuda.load_build_claims(claims_file)
    fetched = []
    results = cuda.check_build_claims(claims, lambda p, v, into, plat=None: fetched.append((p, v)) or wheel)
    assert [problems for _, problems in results] == [
        [], ["dep/lib_cu13.so: sass: the TOML lists ['6.0', '7.5'], the package has ['7.5']"]]
    assert fetched == [("dep", "1.0"), ("dep", "1.0")]
    bad = tmp_path / "bad.toml"
    bad.write_text('[[build_claim]]\npackage = "dep"\nversion = "1.0"\n')
    with pytest.raises(ValueError, match="build_claim #1"):
        cuda.load_build_claims(bad)
    assert len(cuda.load_build_claims()) >= 5  # the shipped ones parse


@pytest.mark.parametrize("blob", [b"", b"MZ\0\0", b"\x7fELF\x01\x01" + b"\0" * 58, elf_with({})[:70]])
def test_not_an_elf_or_truncated_is_an_error(cuda, blob: bytes) -> None:
    with pytest.raises((ValueError, struct.error)):
        cuda.elf_section(blob, ".nv_fatbin")


# ------------------------------------------------------------------------------------ claims verifier

@pytest.fixture(scope="module")
def claims() -> ModuleType:
    return load_tool("verify_claims")


def fake_packages(tmp_path: Path) -> dict[tuple[str, str], Path]:
    """A wheel and an sdist holding the files the claims below read."""
    import io
    import tarfile

    wheel = tmp_path / "eng-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("eng/quant/fp8.py", "class C:\n    @classmethod\n    def get_min_capability(cls) -> int:\n"
                                        "        return 75\n")
        zf.writestr("eng/config/cache.py", 'CacheDType = Literal[\n    "auto",\n    "fp8",\n]\n')
    sdist = tmp_path / "eng-cpp-2.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tf:
        data = b"enum ggml_type {\n    GGML_TYPE_Q2_0    = 42,\n};\n"
        info = tarfile.TarInfo("eng-cpp-2.0/vendor/ggml/include/ggml.h")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    return {("eng", "1.0"): wheel, ("eng-cpp", "2.0"): sdist}


CLAIMS_TOML = """
[[claim]]
engine = "eng"
rules = ["fp8-volta"]
package = "eng"
version = "1.0"
dist = "wheel"
path = "quant/fp8.py"
pattern = 'def get_min_capability\\(cls\\) -> int:\\s*\\n\\s*return (\\d+)'
expect = "75"

[[claim]]
engine = "eng"
package = "eng"
version = "1.0"
dist = "wheel"
path = "config/cache.py"
pattern = 'CacheDType = Literal\\[([^\\]]*)\\]'
item = '"([^"]+)"'
expect_items = ["auto", "fp8", "fp8_e5m2"]

[[claim]]
engine = "eng-cpp"
package = "eng-cpp"
version = "2.0"
dist = "sdist"
path = "ggml/include/ggml.h"
pattern = 'GGML_TYPE_Q2_0\\s*=\\s*(\\d+)'
expect = "42"

[[claim]]
engine = "eng-cpp"
package = "eng-cpp"
version = "2.0"
dist = "sdist"
path = "ggml/include/ggml.h"
pattern = 'GGML_TYPE_NVFP4'
present = false

[[claim]]
engine = "eng-cpp"
package = "eng-cpp"
version = "2.0"
dist = "sdist"
path = "ggml/src/missing.cpp"
pattern = 'x'
present = true
"""


def test_claims_are_checked_in_wheels_and_sdists(claims, tmp_path: Path) -> None:
    packages = fake_packages(tmp_path)
    path = tmp_path / "claims.toml"
    path.write_text(CLAIMS_TOML)
    fetched: list[tuple[str, str, str]] = []

    def fetch(package: str, version: str, dist: str, into: Path) -> Path:
        fetched.append((package, version, dist))
        return packages[(package, version)]

    results = claims.verify(claims.load_claims(path), fetch=fetch)
    assert [problem for _, problem in results] == [
        None, "found ['auto', 'fp8']", None, None, "ggml/src/missing.cpp is not in eng-cpp-2.0.tar.gz"]
    assert fetched == [("eng", "1.0", "wheel"), ("eng-cpp", "2.0", "sdist")]  # each package once


def test_the_shipped_claims_are_well_formed_and_name_real_rules(claims) -> None:
    from qcheck.matrix.loader import load_matrix

    m = load_matrix()
    shipped = claims.load_claims()
    assert len(shipped) >= 20
    for claim in shipped:
        engine = m.engine(claim["engine"])
        known = ({r.id for r in engine.rules} | {r.id for r in engine.modifiers} | {r.rule.id for r in engine.kv_rules}
                 | {"kv_cache accepts"} | {f"parallel {c}" for c in (engine.parallel.checks if engine.parallel else ())})
        assert set(claim["rules"]) <= known, (claim["engine"], set(claim["rules"]) - known)


def test_a_pattern_without_a_group_is_a_problem_not_a_crash(claims) -> None:
    assert claims.check({"pattern": "min 80", "expect": "80"}, "min 80") == "the pattern has no group to compare"
    assert claims.check({"pattern": r"min (\d+)", "expect": "80"}, "min 80") is None


def test_a_claim_without_an_expectation_is_refused(claims, tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('[[claim]]\nengine = "e"\npackage = "e"\nversion = "1"\ndist = "wheel"\npath = "x"\npattern = "y"\n')
    with pytest.raises(ValueError, match="claim #1"):
        claims.load_claims(path)


def test_a_claim_is_checked_at_every_listed_release_its_rules_answer(claims, tmp_path: Path) -> None:
    """--every-covered-version: a claim on fp8-turing-before-marlin (read 0.9.0-0.13.0) is re-checked at each vLLM
    release listed there; `checked_from` cuts the older ones, a sibling claim written for a release keeps it, and the
    `*_at` variants give the claim as it reads at older releases."""
    base = {"engine": "vllm", "rules": ["fp8-turing-before-marlin"], "package": "vllm", "version": "0.13.0",
            "dist": "wheel", "path": "fp8.py", "pattern": r"return (\d+)", "expect": "75",
            "expect_at": {"<0.14.0": "80"}, "path_at": {"<0.11.0": "old/fp8.py"}}
    expanded = claims.at_covered_versions([base])
    assert [c["version"] for c in expanded] == ["0.13.0", "0.9.0", "0.10.1.1", "0.10.2", "0.11.0", "0.12.0"]
    assert [c["version"] for c in claims.at_covered_versions([dict(base, checked_from="0.11.0")])] == \
        ["0.13.0", "0.11.0", "0.12.0"]
    sibling = dict(base, version="0.10.2", pattern=r"min = (\d+)")
    assert [c["version"] for c in claims.at_covered_versions([base, sibling]) if c["pattern"] == base["pattern"]] == \
        ["0.13.0", "0.9.0", "0.10.1.1", "0.11.0", "0.12.0"]
    old = claims.at_version(dict(base, version="0.9.0"))
    assert (old["path"], old["expect"]) == ("old/fp8.py", "80")
    assert claims.at_version(dict(base, version="0.14.0"))[("expect")] == "75"
    # a dependency's claim (another package) stays at its own release
    assert [c["version"] for c in claims.at_covered_versions([dict(base, package="flashinfer-python")])] == ["0.13.0"]


def test_claims_read_the_fetched_release_trees(claims, tmp_path: Path) -> None:
    tree = tmp_path / "releases" / "vllm-0.9.0"
    (tree / "vllm" / "old").mkdir(parents=True)
    (tree / "vllm" / "old" / "fp8.py").write_text("def get_min_capability():\n    return 80\n")
    (tree / "RELEASE.json").write_text("{}")
    claim = {"engine": "vllm", "rules": [], "package": "vllm", "version": "0.9.0", "dist": "wheel",
             "path": "fp8.py", "path_at": {"<0.11.0": "old/fp8.py"}, "pattern": r"return (\d+)", "expect": "80"}

    def offline(*_a: object) -> Path:
        raise AssertionError("a fetched tree must be read, not downloaded")

    fetch = claims.tree_or_download(tmp_path / "releases")
    claims.download, saved = offline, claims.download
    try:
        assert [p for _, p in claims.verify([claim], fetch=fetch)] == [None]
        assert [p for _, p in claims.verify([dict(claim, expect="75")], fetch=fetch)] == ["found '80'"]
    finally:
        claims.download = saved
