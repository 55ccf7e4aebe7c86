"""A smaller quant of the same model from its Hub repo (issue 33 item 3: "when the directory or Hub repo has one").

Against the fake Hub on 127.0.0.1 (``HF_ENDPOINT``), through the real CLI: Llama-3.1-8B in Q8_0, Q4_K_M and Q3_K_M on
an 8 GB card where Q8_0 does not fit whole. The quant option is the largest smaller quant that fits whole, named as
``qcheck check`` names it (``org/name:FILE``) and in the engine's own Hub words (llama.cpp ``-hf org/name:Q4_K_M``,
Ollama ``hf.co/org/name:Q4_K_M``); asking it back (the qcheck target, or the engine command) gives its own figures.
A smaller file of another model is no option; a listing that fails or a hostile header is "no sibling" (the exit code
and the other options unchanged, no traceback); a split set is one sibling, its size every part's; at most
``MAX_SIBLINGS`` models' headers are read, and none after the first that fits whole."""

from __future__ import annotations

import dataclasses
import json
import struct
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from qcheck.cli import cli
from qcheck.options import MAX_SIBLINGS
from support.gate_helpers import qcheck
from support.hubserver import FakeHub, VirtualFile
from support.model_headers import ModelHeader, light, llama31_8b, write_header, write_sparse_tensors

GPU = "rtx-2080"  # 8 GB: Llama-3.1-8B Q8_0 at 8k keeps layers in RAM, Q4_K_M fits whole
ASK = ("--gpu", GPU, "--context", "8192")
STEM = "Llama-3.1-8B-Instruct"
Q4 = f"{STEM}-Q4_K_M.gguf"
Q3 = f"{STEM}-Q3_K_M.gguf"
Q8 = f"{STEM}-Q8_0.gguf"
OTHER = "Llama-3.2-1B-Instruct-Q4_K_M.gguf"  # another model: fewer layers, fewer parameters


def _q8_0() -> ModelHeader:
    """Llama-3.1-8B in Q8_0 (every quantised tensor Q8_0, file type 7)."""
    m = llama31_8b("Q4_0")
    return dataclasses.replace(m, label=f"{STEM}-Q8_0", metadata={**m.metadata, "general.file_type": 7},
                               tensors=[(n, s, "Q8_0" if t == "Q4_0" else t) for n, s, t in m.tensors])


def _other_model() -> ModelHeader:
    """A 16-layer model of the same architecture (a draft model kept in the same repo)."""
    m = llama31_8b("Q4_K_M")
    keep = [t for t in m.tensors if not t[0].startswith("blk.") or int(t[0].split(".")[1]) < 16]
    return dataclasses.replace(m, metadata={**m.metadata, "llama.block_count": 16}, tensors=keep)


def _virtual(model: ModelHeader, path: Path) -> VirtualFile:
    """The header of ``model`` followed by zeros up to its full size (the fake Hub never holds the weights)."""
    head, size = write_header(path, light(model))
    with open(path, "rb") as f:
        data = f.read(head)
    path.unlink()
    return VirtualFile(data, size)


def _split(model: ModelHeader, tmp: Path) -> list[VirtualFile]:
    """``model`` as a gguf-split set of two parts: the metadata and the first half of the tensors in part 1."""
    import gguf

    half = len(model.tensors) // 2
    split = {"split.count": 2, "split.tensors.count": len(model.tensors)}
    first = _virtual(dataclasses.replace(model, metadata={**model.metadata, **split, "split.no": 0},
                                         tensors=model.tensors[:half]), tmp / "part1.gguf")
    writer = gguf.GGUFWriter(tmp / "part2.gguf", model.arch)
    for key, value in {**split, "split.no": 1}.items():
        writer.add_uint16(key, value) if key != "split.tensors.count" else writer.add_int32(key, value)
    head, size = write_sparse_tensors(writer, model.tensors[half:], tmp / "part2.gguf")
    with open(tmp / "part2.gguf", "rb") as f:
        second = VirtualFile(f.read(head), size)
    (tmp / "part2.gguf").unlink()
    return [first, second]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every file the repos below are made of, written once."""
    tmp = tmp_path_factory.mktemp("hub-quants")
    return {"Q8_0": _virtual(_q8_0(), tmp / "q8.gguf"),
            "Q4_K_M": _virtual(llama31_8b("Q4_K_M"), tmp / "q4.gguf"),
            "Q3_K_M": _virtual(llama31_8b("Q3_K_M"), tmp / "q3.gguf"),
            "other": _virtual(_other_model(), tmp / "other.gguf"),
            "Q8_0 split": _split(_q8_0(), tmp), "Q4_K_M split": _split(llama31_8b("Q4_K_M"), tmp)}


def _runner() -> CliRunner:
    """stdout and stderr apart on every click the project allows (8.1 mixes them unless told not to)."""
    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]  # click < 8.2
    except TypeError:  # click >= 8.2 keeps them apart and has no such argument
        return CliRunner()


def _run(*args: str) -> tuple[int, str, str]:
    result = _runner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def _check(*args: str) -> dict[str, Any]:
    code, out, err = _run("check", "--json", *args)
    assert code == 0, out + err
    data: dict[str, Any] = json.loads(out)
    return data


def _verdict(*args: str) -> dict[str, Any]:
    (v,) = _check(*args)["verdicts"]
    return v


def _quant(v: dict[str, Any]) -> dict[str, Any] | None:
    found = [o for o in v["options"] if o["kind"] == "quant"]
    assert len(found) <= 1
    return found[0] if found else None


def _figures(v: dict[str, Any]) -> tuple[object, ...]:
    m = v["memory"]
    return (v["status"], v["startup"]["outcome"], m["context"], m["fits"], m["total_bytes"],
            m["max_context_asked_gpus"], m["speed"]["decode_tokens_per_s"])


def _option_figures(o: dict[str, Any]) -> tuple[object, ...]:
    return (o["status"], o["startup"], o["context"], o["fits"], o["gpu_bytes"], o["max_context"],
            o["decode_tokens_per_s"])


def test_llama_cpp_gets_the_largest_smaller_quant_that_fits_whole_in_its_hf_flag(hub: FakeHub, files: dict) -> None:
    """Through the real CLI in a subprocess: -hf org/name:Q4_K_M, its size, all on the GPU, exit 0; Q3_K_M's header
    is never read (Q4_K_M already fits whole) and the repo is listed once more, not once per quant."""
    hub.add_repo("org/Llama-GGUF", {Q8: files["Q8_0"], Q4: files["Q4_K_M"], Q3: files["Q3_K_M"]})
    done = qcheck("check", "org/Llama-GGUF:Q8_0", "--engine", "llama.cpp", *ASK, matrix=False, COLUMNS="200")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "-ngl 24 of 33" in done.stdout  # Q8_0 itself keeps layers in RAM
    line = next(ln for ln in done.stdout.splitlines() if "-hf org/Llama-GGUF:Q4_K_M" in ln)
    assert "(Q4_K_M, 4.91 GB)" in line and "starts, all on the GPU (5.4 GiB)" in line
    assert hub.requests(r"Q3_K_M\.gguf$") == []
    assert len(hub.requests(r"^/api/models/")) == 2  # the model's own listing, then one for its siblings


def test_the_option_asked_back_gives_its_own_figures(hub: FakeHub, files: dict) -> None:
    """One answer: the option's figures are what `check org/name:FILE` and `check -- llama-server -hf ...` say."""
    hub.add_repo("org/Llama-GGUF", {Q8: files["Q8_0"], Q4: files["Q4_K_M"], Q3: files["Q3_K_M"]})
    v = _verdict("org/Llama-GGUF:Q8_0", "--engine", "llama.cpp", *ASK)
    assert v["startup"]["outcome"] == "offloaded"
    quant = _quant(v)
    assert quant is not None
    assert quant["flags"] == ["-hf", "org/Llama-GGUF:Q4_K_M"]
    assert quant["settings"] == {"model": f"org/Llama-GGUF:{Q4}"} and quant["model"] == f"org/Llama-GGUF:{Q4}"
    assert quant["label"] == "-hf org/Llama-GGUF:Q4_K_M (Q4_K_M, 4.91 GB)"
    assert (quant["startup"], quant["fits"], quant["offload"]) == ("starts", True, None)
    assert quant["decode_tokens_per_s"] > v["memory"]["speed"]["decode_tokens_per_s"]
    by_name = _verdict(quant["model"], "--engine", "llama.cpp", *ASK)
    by_flags = _verdict("--gpu", GPU, "--", "llama-server", *quant["flags"], "-c", "8192")
    assert _figures(by_name) == _figures(by_flags) == _option_figures(quant)


def _split_repo(hub: FakeHub, files: dict) -> list[str]:
    """org/Split-GGUF: Q8_0 and Q4_K_M each split in two parts in their own folder (as big repos ship them), and a
    single-file Q3_K_M; the Q4_K_M parts' names."""
    q8_parts = [f"Q8_0/{STEM}-Q8_0-0000{i}-of-00002.gguf" for i in (1, 2)]
    q4_parts = [f"Q4_K_M/{STEM}-Q4_K_M-0000{i}-of-00002.gguf" for i in (1, 2)]
    hub.add_repo("org/Split-GGUF", {**dict(zip(q8_parts, files["Q8_0 split"], strict=True)),
                                    **dict(zip(q4_parts, files["Q4_K_M split"], strict=True)), Q3: files["Q3_K_M"]})
    return q4_parts


@pytest.mark.parametrize("repo, flags", [
    ("org/Llama-GGUF", ["hf.co/org/Llama-GGUF:Q4_K_M"]),
    # a quant label another model shares: the Hub takes the file name as the tag
    ("org/Shared-GGUF", [f"hf.co/org/Shared-GGUF:{Q4}"]),
    # a split set: the Hub refuses Ollama a sharded GGUF, so no hf.co/ name (the option names it as qcheck does)
    ("org/Split-GGUF", [])])
def test_ollama_names_the_hub_quant_hf_co(hub: FakeHub, files: dict, repo: str, flags: list[str]) -> None:
    """Ollama takes a Hub quant as a model name, hf.co/org/name:TAG (never llama.cpp's -hf); asked back by that name
    (`ollama run`, the context from OLLAMA_CONTEXT_LENGTH) or by qcheck's, it gives the option's figures."""
    hub.add_repo("org/Llama-GGUF", {Q8: files["Q8_0"], Q4: files["Q4_K_M"], Q3: files["Q3_K_M"]})
    hub.add_repo("org/Shared-GGUF", {Q8: files["Q8_0"], Q4: files["Q4_K_M"], OTHER: files["other"]})
    q4_parts = _split_repo(hub, files)
    quant = _quant(_verdict(f"{repo}:Q8_0", "--engine", "ollama", *ASK))
    assert quant is not None
    model = f"{repo}:{q4_parts[0] if flags == [] else Q4}"
    assert (quant["flags"], quant["model"]) == (flags, model)
    assert quant["label"].startswith(f"{flags[0] if flags else model} (Q4_K_M, ")
    again = _verdict(model, "--engine", "ollama", *ASK) if not flags else \
        _verdict("--gpu", GPU, "--", "OLLAMA_CONTEXT_LENGTH=8192", "ollama", "run", *flags)
    assert _figures(again) == _option_figures(quant)


@pytest.mark.parametrize("target, flags, model", [
    # a branch: neither -hf nor hf.co/ takes one (both fetch main), so the option names the quant as qcheck does
    ("org/Llama-GGUF@dev:Q8_0", [], f"org/Llama-GGUF@dev:{Q4}"),
    ("org/Llama-GGUF@main:Q8_0", ["-hf", "org/Llama-GGUF:Q4_K_M"], f"org/Llama-GGUF@main:{Q4}"),
    # a quant label two models share: llama.cpp's file flag names the one meant
    ("org/Shared-GGUF:Q8_0", ["-hf", "org/Shared-GGUF", "-hff", Q4], f"org/Shared-GGUF:{Q4}"),
    # a label of its own (qcheck reads UD-Q4_K_M apart) that llama.cpp's -hf :Q4_K_M would still match in UD-Q4_K_M
    ("org/Unsloth-GGUF:Q8_0", ["-hf", "org/Unsloth-GGUF", "-hff", Q4], f"org/Unsloth-GGUF:{Q4}")])
def test_the_hub_words_follow_the_branch_and_what_the_tag_matches(hub: FakeHub, files: dict, target: str,
                                                                   flags: list[str], model: str) -> None:
    hub.add_repo("org/Llama-GGUF", {Q8: files["Q8_0"], Q4: files["Q4_K_M"]})
    hub.add_repo("org/Llama-GGUF", {Q8: files["Q8_0"], Q4: files["Q4_K_M"]}, branch="dev")
    hub.add_repo("org/Shared-GGUF", {Q8: files["Q8_0"], Q4: files["Q4_K_M"], OTHER: files["other"]})
    hub.add_repo("org/Unsloth-GGUF", {Q8: files["Q8_0"], Q4: files["Q4_K_M"],
                                      OTHER.replace("Q4_K_M", "UD-Q4_K_M"): files["other"]})
    quant = _quant(_verdict(target, "--engine", "llama.cpp", *ASK))
    assert quant is not None
    assert (quant["flags"], quant["model"]) == (flags, model)
    assert quant["label"].startswith(f"{' '.join(flags) or model} (Q4_K_M, 4.91 GB)")
    by_flags = _verdict("--gpu", GPU, "--", "llama-server", *flags, "-c", "8192") if flags else \
        _verdict(model, "--engine", "llama.cpp", *ASK)
    assert _figures(by_flags) == _option_figures(quant)


def _kinds(v: dict[str, Any]) -> list[str]:
    return [o["kind"] for o in v["options"]]


def test_a_smaller_file_of_another_model_is_no_option(hub: FakeHub, files: dict) -> None:
    hub.add_repo("org/Mixed-GGUF", {Q8: files["Q8_0"], OTHER: files["other"]})
    v = _verdict("org/Mixed-GGUF:Q8_0", "--engine", "llama.cpp", *ASK)
    assert hub.requests(OTHER)  # its header was read, and it is another model
    assert _quant(v) is None and _kinds(v) == ["as-asked", "kv-cache", "kv-cache", "more-gpus"]


#: per engine, the verdict of Q8_0 alone in its repo (no smaller quant): what a repo that cannot be read must give
_ALONE: dict[str, dict[str, Any]] = {}


def _alone(engine: str, hub: FakeHub, files: dict) -> dict[str, Any]:
    if engine not in _ALONE:
        hub.add_repo("org/Alone-GGUF", {Q8: files["Q8_0"]})
        _ALONE[engine] = _verdict("org/Alone-GGUF:Q8_0", "--engine", engine, *ASK)  # exit 0 (asserted there)
    return _ALONE[engine]


@pytest.mark.parametrize("fault, engine", [("listing", "llama.cpp"), ("header", "ollama"), ("pickle", "llama.cpp"),
                                           ("file", "ollama")])
def test_a_repo_that_cannot_be_read_gives_no_quant_and_changes_nothing_else(hub: FakeHub, files: dict, engine: str,
                                                                            fault: str) -> None:
    """The second listing fails (HTTP 500), a sibling's header is hostile (2^62 tensors and keys) or a pickle, or its
    bytes cannot be fetched (404): no quant option, the same exit code and other options as a repo with no smaller
    quant, nothing on stderr (an optional read is tried once: no retry, no wait, no notice)."""
    hostile = VirtualFile(struct.pack("<4sIQQ", b"GGUF", 3, 1 << 62, 1 << 62), 4_900_000_000)
    pickled = VirtualFile(b"\x80\x02}q\x00.", 4_900_000_000)
    repo = {Q8: files["Q8_0"], Q4: {"header": hostile, "pickle": pickled}.get(fault, files["Q4_K_M"])}
    hub.add_repo("org/Faulty-GGUF", repo)
    if fault == "listing":
        hub.inject(r"^/api/models/org/Faulty-GGUF", 500, times=10, skip=1)
    if fault == "file":
        hub.inject(rf"/resolve/.*/{Q4}$", 404, times=10)
    alone = _alone(engine, hub, files)
    code, out, err = _run("check", "org/Faulty-GGUF:Q8_0", "--engine", engine, *ASK, "--json")
    if fault == "listing":  # the model's own listing answered, the siblings' one failed, tried once
        assert [r.status for r in hub.requests(r"^/api/models/org/Faulty-GGUF")] == [200, 500]
    else:
        assert {r.status for r in hub.requests(rf"/{Q4}$")} == {404 if fault == "file" else 206}
    assert (code, err) == (0, ""), out + err  # the exit code of the model with no smaller quant; not a word more
    (v,) = json.loads(out)["verdicts"]
    assert _quant(v) is None and _kinds(v) == _kinds(alone)
    assert [o["flags"] for o in v["options"]] == [o["flags"] for o in alone["options"]]


def test_a_split_set_is_one_sibling_of_every_parts_size(hub: FakeHub, files: dict) -> None:
    """Q8_0 and Q4_K_M each split in two parts in their own folder (as big repos ship them): the option is the Q4_K_M
    set, -hf org/name:Q4_K_M, its size the sum of its parts, and asked back by its first part it gives its figures."""
    q4_parts = _split_repo(hub, files)
    data = _check("org/Split-GGUF:Q8_0", "--engine", "llama.cpp", *ASK)
    assert data["inspection"]["gguf_split_count"] == 2
    (v,) = data["verdicts"]
    quant = _quant(v)
    assert quant is not None
    size = sum(f.size for f in files["Q4_K_M split"])
    assert (quant["flags"], quant["model"]) == (["-hf", "org/Split-GGUF:Q4_K_M"], f"org/Split-GGUF:{q4_parts[0]}")
    assert quant["label"] == f"-hf org/Split-GGUF:Q4_K_M (Q4_K_M, {size / 1e9:.2f} GB)"
    assert (quant["startup"], quant["fits"]) == ("starts", True)
    assert _figures(_verdict(quant["model"], "--engine", "llama.cpp", *ASK)) == _option_figures(quant)
    assert _figures(_verdict("--gpu", GPU, "--", "llama-server", *quant["flags"], "-c", "8192")) == \
        _option_figures(quant)


def test_at_most_max_siblings_headers_are_read(hub: FakeHub, files: dict) -> None:
    """A repo of many smaller files of another model: the headers of MAX_SIBLINGS of them (the largest), no more."""
    others = {f"Llama-3.2-1B-Instruct-v{i:02d}-Q4_K_M.gguf": VirtualFile(files["other"].head, files["other"].size - i)
              for i in range(MAX_SIBLINGS + 4)}
    hub.add_repo("org/Many-GGUF", {Q8: files["Q8_0"], **others})
    v = _verdict("org/Many-GGUF:Q8_0", "--engine", "llama.cpp", *ASK)
    assert _quant(v) is None
    read = {r.path.rsplit("/", 1)[1] for r in hub.requests(r"-v\d\d-Q4_K_M\.gguf$")}
    assert read == {f"Llama-3.2-1B-Instruct-v{i:02d}-Q4_K_M.gguf" for i in range(MAX_SIBLINGS)}


def test_several_verdicts_read_the_repo_once(hub: FakeHub, files: dict) -> None:
    """Two engines on two 8 GB cards: four verdicts with options, one more listing and one header read between them
    (each verdict's quant is the same Q4_K_M, in its own engine's words)."""
    hub.add_repo("org/Llama-GGUF", {Q8: files["Q8_0"], Q4: files["Q4_K_M"], Q3: files["Q3_K_M"]})
    data = _check("org/Llama-GGUF:Q8_0", "--engine", "llama.cpp", "--engine", "ollama", "--gpu", GPU, "--gpu",
                  "rtx-3060:8gb", "--context", "8192")
    quants = [_quant(v) for v in data["verdicts"]]
    assert [q["flags"] if q else None for q in quants] == [["-hf", "org/Llama-GGUF:Q4_K_M"]] * 2 + [
        ["hf.co/org/Llama-GGUF:Q4_K_M"]] * 2
    assert len(hub.requests(r"^/api/models/")) == 2
    assert len({r.path for r in hub.requests(rf"/{Q4}$")}) == 1 and hub.requests(r"Q3_K_M\.gguf$") == []
    assert len(hub.requests(rf"/{Q4}$")) == len(hub.requests(rf"/{Q8}$"))  # read as often as the model itself


def test_every_door_gets_the_same_hub_option(hub: FakeHub, files: dict, tmp_path: Path) -> None:
    """The check command, a gate policy naming the Hub model and the Python API: the same options, Hub quant included."""
    from qcheck.pipeline import run
    from qcheck.request import CheckRequest, Deploy

    hub.add_repo("org/Llama-GGUF", {Q8: files["Q8_0"], Q4: files["Q4_K_M"]})
    target = "org/Llama-GGUF:Q8_0"
    from_check = _verdict(target, "--engine", "llama.cpp", *ASK)["options"]
    policy = tmp_path / "policy.toml"
    policy.write_text(f'models = [{{ path = "{target}" }}]\n[memory]\ncontext = 8192\n'
                      f'[[targets]]\nengine = ["llama.cpp"]\ngpu = ["{GPU}"]\n')
    code, out, err = _run("gate", "--policy", str(policy), "--json")
    assert code == 0, out + err
    from_gate = next(v for r in json.loads(out)["models"] for v in r["verdicts"])["options"]
    (api,) = run(CheckRequest(target, ("llama.cpp",), (GPU,), Deploy(context=8192, batch=1), memory=True)).verdicts
    assert from_check == from_gate == [o.to_json() for o in api.options]
    assert _quant({"options": from_check}) is not None
