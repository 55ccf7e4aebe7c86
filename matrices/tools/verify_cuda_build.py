"""Confirm a `[[build]]` entry of an engine file against the released package: which CUDA architectures
its extension libraries carry cubins (SASS) and PTX for.

    python matrices/tools/verify_cuda_build.py vllm 0.33.0          # download the wheel, compare with the TOML
    python matrices/tools/verify_cuda_build.py --so path/to/_C.abi3.so   # just print what a library holds
    python matrices/tools/verify_cuda_build.py --claims               # the [[build_claim]]s of tools/claims.toml

A `[[build_claim]]` (package, version, libraries, sass, ptx, rules, optional platform) states what the fatbinaries of a
dependency's wheel hold, for rules that rest on it (PyTorch for transformers, bitsandbytes' per-CUDA libraries);
those wheels are fetched with `pip download --isolated` so a local CPU-only build cannot stand in for them.

The wheel comes from the package index through `pip download --no-deps` into a temporary directory; each
`*.so` in the engine's package is read for its `.nv_fatbin` ELF section, whose fatbinary entries name their
kind (cubin/PTX) and target architecture. An architecture counts when it has at least MIN_ENTRIES entries
(a lone kernel, such as vLLM's single sm52 entry, does not make a GPU generation usable). Exit 0 when the
TOML lists exactly the architectures found, 1 when they differ (printing both), 2 on usage errors.
"""

from __future__ import annotations

import argparse
import struct
import subprocess
import sys
import tempfile
import zipfile
from collections import Counter
from pathlib import Path

import tomllib

FATBIN_MAGIC = 0xBA55ED50
MIN_ENTRIES = 5
ROOT = Path(__file__).resolve().parents[1]
#: the extension libraries whose fatbinaries describe the engine's CUDA kernels, per engine
LIBRARIES = {"vllm": ("vllm/_C.abi3.so", "vllm/_C_stable_libtorch.abi3.so")}
PACKAGES = {"vllm": "vllm"}


def elf_section(data: bytes, name: str) -> bytes | None:
    """The bytes of the named section of a 64-bit little-endian ELF file, or None."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if shoff == 0 or shentsize < 64 or shoff + shnum * shentsize > len(data) or shstrndx >= shnum:
        raise ValueError("bad section header table")

    def header(i: int) -> tuple[int, int, int]:
        base = shoff + i * shentsize
        name_off, = struct.unpack_from("<I", data, base)
        offset, size = struct.unpack_from("<QQ", data, base + 0x18)
        return name_off, offset, size

    _, str_off, str_size = header(shstrndx)
    strtab = data[str_off:str_off + str_size]
    for i in range(shnum):
        name_off, offset, size = header(i)
        end = strtab.find(b"\0", name_off)
        if strtab[name_off:end].decode(errors="replace") == name:
            if offset + size > len(data):
                raise ValueError(f"section {name} runs past the end of the file")
            return data[offset:offset + size]
    return None


def fatbin_entries(section: bytes) -> Counter[tuple[str, str]]:
    """(kind, capability) -> number of entries, for every fatbinary in a `.nv_fatbin` section."""
    found: Counter[tuple[str, str]] = Counter()
    pos = 0
    while pos + 16 <= len(section):
        magic, _version, header_size, body_size = struct.unpack_from("<IHHQ", section, pos)
        if magic != FATBIN_MAGIC:
            pos += 8  # fatbinaries are 8-byte aligned inside the section
            continue
        entry, end = pos + header_size, min(pos + header_size + body_size, len(section))
        while entry + 32 <= end:
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", section, entry)
            arch, = struct.unpack_from("<I", section, entry + 28)
            label = {1: "ptx", 2: "sass"}.get(kind, f"kind{kind}")
            found[(label, f"{arch // 10}.{arch % 10}")] += 1
            if entry_header == 0:
                break
            entry += entry_header + payload
        pos = max(end, pos + 8)
    return found


def architectures(found: Counter[tuple[str, str]], min_entries: int = MIN_ENTRIES) -> tuple[list[str], list[str]]:
    """(SASS capabilities, PTX capabilities) with at least ``min_entries`` entries, sorted."""
    def pick(kind: str) -> list[str]:
        ccs = {cc for (k, cc), n in found.items() if k == kind and n >= min_entries}
        return sorted(ccs, key=lambda c: tuple(map(int, c.split("."))))
    return pick("sass"), pick("ptx")


def read_library(data: bytes) -> Counter[tuple[str, str]]:
    section = elf_section(data, ".nv_fatbin")
    return fatbin_entries(section) if section is not None else Counter()


def read_wheel(wheel: Path, libraries: tuple[str, ...]) -> Counter[tuple[str, str]]:
    """Sum of the fatbinary entries of the named libraries inside a wheel (missing ones are skipped)."""
    total: Counter[tuple[str, str]] = Counter()
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for lib in libraries:
            if lib in names:
                total += read_library(zf.read(lib))
    return total


def toml_build(engine: str, version: str) -> dict | None:
    """The `[[build]]` entry of matrices/engines/<engine>.toml covering ``version``."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    data = tomllib.loads((ROOT / "engines" / f"{engine}.toml").read_text())
    for build in data.get("build", []):
        spec = build.get("versions")
        if spec is None or SpecifierSet(spec).contains(Version(version), prereleases=True):
            return build
    return None


def compare(expected: dict | None, sass: list[str], ptx: list[str], kind: str = "build") -> list[str]:
    """Differences between a `[[build]]` entry (or a `[[build_claim]]`: keys sass/ptx) and what the package holds
    (empty: confirmed)."""
    if expected is None:
        return ["no [[build]] entry covers this version"]
    out = []
    keys = ("cuda_sass", "cuda_ptx") if kind == "build" else ("sass", "ptx")
    for key, found in zip(keys, (sass, ptx), strict=True):
        listed = sorted(expected.get(key, []), key=lambda c: tuple(map(int, c.split("."))))
        if listed != found:
            out.append(f"{key}: the TOML lists {listed}, the package has {found}")
    return out


def download(package: str, version: str, into: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                    f"{package}=={version}", "-d", str(into)], check=True, capture_output=True)
    wheels = sorted(into.glob("*.whl"))
    if not wheels:
        raise SystemExit(f"no wheel for {package}=={version}")
    return wheels[0]


CLAIMS = Path(__file__).resolve().parent / "claims.toml"


def load_build_claims(path: Path = CLAIMS) -> list[dict]:
    claims = tomllib.loads(path.read_text()).get("build_claim", [])
    for i, c in enumerate(claims):
        missing = {"package", "version", "libraries", "sass", "ptx", "rules"} - set(c)
        if missing:
            raise ValueError(f"build_claim #{i + 1}: needs {sorted(missing)}")
    return claims


def fetch_isolated(package: str, version: str, into: Path, platform: str | None = None) -> Path:
    """The package index's wheel, ignoring local find-links (a CPU-only torch there would stand in for CUDA's)."""
    import os

    cmd = [sys.executable, "-m", "pip", "download", "--isolated", "--no-deps", "--only-binary=:all:",
           f"{package}=={version}", "-d", str(into)]
    if platform:
        cmd += ["--platform", platform, "--python-version", f"{sys.version_info.major}.{sys.version_info.minor}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    subprocess.run(cmd, check=True, capture_output=True, env=env)
    wheels = sorted(into.glob("*.whl"))
    if not wheels:
        raise SystemExit(f"no wheel for {package}=={version}")
    return wheels[0]


def check_build_claims(claims: list[dict], fetch=fetch_isolated) -> list[tuple[dict, list[str]]]:  # type: ignore[no-untyped-def]
    """(claim, differences) per claim; each library of a claim is compared on its own."""
    out = []
    for claim in claims:
        with tempfile.TemporaryDirectory() as tmp:
            wheel = fetch(claim["package"], claim["version"], Path(tmp), claim.get("platform"))
            problems = []
            for lib in claim["libraries"]:
                sass, ptx = architectures(read_wheel(wheel, (lib,)), claim.get("min_entries", MIN_ENTRIES))
                problems += [f"{lib}: {p}" for p in compare(claim, sass, ptx, "claim")]
        out.append((claim, problems))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("engine", nargs="?")
    parser.add_argument("versions", nargs="*")
    parser.add_argument("--so", type=Path, help="print the architectures of one library and exit")
    parser.add_argument("--claims", action="store_true", help="check the [[build_claim]]s of tools/claims.toml")
    args = parser.parse_args(argv)
    if args.claims:
        results = check_build_claims(load_build_claims())
        for claim, problems in results:
            print(f"{'confirmed' if not problems else 'DIFFERS  '} {claim['package']} {claim['version']} "
                  f"({', '.join(claim['rules'])})" + ("" if not problems else ": " + "; ".join(problems)))
        failed = sum(bool(p) for _, p in results)
        print(f"{len(results) - failed} of {len(results)} build claims confirmed")
        return 1 if failed else 0
    if args.so:
        sass, ptx = architectures(read_library(args.so.read_bytes()))
        print(f"sass: {' '.join(sass)}\nptx: {' '.join(ptx)}")
        return 0
    if args.engine not in LIBRARIES or not args.versions:
        parser.error(f"give an engine ({', '.join(LIBRARIES)}) and one or more versions")
    failed = 0
    for version in args.versions:
        with tempfile.TemporaryDirectory() as tmp:
            wheel = download(PACKAGES[args.engine], version, Path(tmp))
            sass, ptx = architectures(read_wheel(wheel, LIBRARIES[args.engine]))
        problems = compare(toml_build(args.engine, version), sass, ptx)
        print(f"{args.engine} {version}: sass {' '.join(sass)}; ptx {' '.join(ptx)}: "
              + ("confirmed" if not problems else "; ".join(problems)))
        failed += bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
