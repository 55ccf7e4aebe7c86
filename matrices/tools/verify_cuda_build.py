"""Confirm a `[[build]]` entry of an engine file against the released package: which CUDA architectures
its extension libraries carry cubins (SASS) and PTX for.

    python matrices/tools/verify_cuda_build.py vllm 0.33.0          # download the wheel, compare with the TOML
    python matrices/tools/verify_cuda_build.py --so path/to/_C.abi3.so   # just print what a library holds

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


def compare(expected: dict | None, sass: list[str], ptx: list[str]) -> list[str]:
    """Differences between a `[[build]]` entry and what the package holds (empty: confirmed)."""
    if expected is None:
        return ["no [[build]] entry covers this version"]
    out = []
    for key, found in (("cuda_sass", sass), ("cuda_ptx", ptx)):
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("engine", nargs="?")
    parser.add_argument("versions", nargs="*")
    parser.add_argument("--so", type=Path, help="print the architectures of one library and exit")
    args = parser.parse_args(argv)
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
