"""What fits the GPUs named (issue 33 item 3) and capacity in the text (item 5).

Item 3: on an 8 GB card at 32k, the answer was one knob (`-ngl 24 of 33`) and a max context on 2 GPUs when one was
named. Now ``verdicts[].options``: the largest context whole on the GPU, the KV types the engine accepts there, a
smaller quant of the same model beside it, the engine's memory budget, more GPUs only as a labelled alternative;
each spelled in the engine's own words and each judged like the deployment asked, so re-asking with an option's
settings gives the same figures (one answer). Engines llama.cpp, Ollama and vLLM; GGUF and safetensors; text at a
pipe and at 100 columns, Markdown, JSON; the check command, a gate policy and the Python API.

Item 5: the KV pool in tokens and vLLM's own "Maximum concurrency" figure in the text, and a memory line at the
engine's default context when none is asked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from qcheck.cli import cli
from qcheck.pipeline import run
from qcheck.request import CheckRequest, Deploy
from support.contract import validate
from support.gate_helpers import qcheck
from support.model_headers import light, llama31_8b, write_header
from support.startup_models import awq_qwen7b

SMALL = "rtx-2080"  # 8 GB, with a sourced bandwidth: the speed of each option


@pytest.fixture(scope="module")
def quants(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Llama-3.1-8B in three of llama.cpp's quants, side by side (a smaller quant of the same model is an option)."""
    d = tmp_path_factory.mktemp("quants")
    for ftype in ("Q4_K_M", "Q4_0", "Q3_K_M"):
        write_header(d / f"Llama-3.1-8B-Instruct-{ftype}.gguf", light(llama31_8b(ftype)))
    return d


@pytest.fixture(scope="module")
def awq(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return awq_qwen7b(tmp_path_factory.mktemp("awq") / "st-awq-qwen7b")


def _invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner(env=env).invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout


def _json(*args: str) -> dict[str, Any]:
    code, out = _invoke(*args, "--json")
    assert code in (0, 1), out
    return json.loads(out)


def _by_kind(options: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for o in options:
        out.setdefault(o["kind"], []).append(o)
    return out


def test_an_8gb_card_at_32k_gets_every_way_to_run_it_in_llama_cpps_flags(quants: Path) -> None:
    """Through the real CLI (a subprocess), the issue's case."""
    model = quants / "Llama-3.1-8B-Instruct-Q4_K_M.gguf"
    done = qcheck("check", str(model), "--engine", "llama.cpp", "--gpu", SMALL, "--context", "32768", "--json",
                  matrix=False)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    validate(data, "check")  # verdicts[].options, speed.decode_at: the public contract, closed
    (v,) = data["verdicts"]
    kinds = _by_kind(v["options"])
    assert [o["kind"] for o in v["options"]] == ["as-asked", "context", "kv-cache", "kv-cache", "quant", "more-gpus"]
    (asked,) = kinds["as-asked"]
    assert asked["offload"] == "-ngl 24 of 33" and asked["startup"] == "offloaded" and asked["gpus"] == 1
    # the largest context with the whole model on the one GPU, and it starts so
    (ctx,) = kinds["context"]
    assert ctx["flags"] == ["-c", "15360"] and ctx["startup"] == "starts" and ctx["fits"] is True
    assert ctx["offload"] is None and ctx["context"] == 15360 == asked["max_context"]
    # the KV types llama.cpp accepts there: q8_0 halves the cache (fewer layers in RAM), q4_0 fits it whole
    q8, q4 = kinds["kv-cache"]
    assert q8["flags"] == ["-ctk", "q8_0", "-ctv", "q8_0"] and q8["offload"] == "-ngl 31 of 33"
    assert q8["ram_bytes"] < asked["ram_bytes"] and q8["max_context"] > ctx["context"]
    assert q4["flags"] == ["-ctk", "q4_0", "-ctv", "q4_0"] and q4["startup"] == "starts" and q4["offload"] is None
    # a smaller quant of the same model beside it (Q4_0 and Q3_K_M; neither fits whole: the smallest is given)
    (quant,) = kinds["quant"]
    assert quant["model"] == str(quants / "Llama-3.1-8B-Instruct-Q3_K_M.gguf")
    assert quant["flags"] == ["-m", quant["model"]] and "Q3_K_M" in quant["label"]
    assert quant["ram_bytes"] < asked["ram_bytes"]
    # more GPUs: never silently, always labelled as more than named
    (more,) = kinds["more-gpus"]
    assert more["gpus"] == 2 and "more than named" in more["label"]
    # each option's decode ceiling is the deployment's own: faster where fewer layers sit in RAM
    assert q4["decode_tokens_per_s"] > q8["decode_tokens_per_s"] > asked["decode_tokens_per_s"]
    # the memory line says the one GPU's max context first, more GPUs as more than named
    assert "max context on one GPU 15360 (the whole model on it); 65536 with 2 GPUs (more than named)" in \
        v["memory"]["summary"]


@pytest.mark.parametrize("flags", [["-c", "15360"], ["-c", "32768", "-ctk", "q8_0", "-ctv", "q8_0"],
                                   ["-c", "32768", "-ctk", "q4_0", "-ctv", "q4_0"]])
def test_asking_with_an_options_flags_gives_that_options_answer(quants: Path, flags: list[str]) -> None:
    """One answer: an option's figures are what `check -- llama-server ... <its flags>` says."""
    model = str(quants / "Llama-3.1-8B-Instruct-Q4_K_M.gguf")
    options = _json("check", model, "--engine", "llama.cpp", "--gpu", SMALL, "--context", "32768")[
        "verdicts"][0]["options"]
    option = next(o for o in options if o["flags"] == flags[2:] or o["flags"] == flags)
    code, out = _invoke("check", "--gpu", SMALL, "--json", "--", "llama-server", "-m", model, *flags)
    assert code == 0, out
    (v,) = json.loads(out)["verdicts"]
    m = v["memory"]
    assert (v["startup"]["outcome"], m["context"], m["speed"]["decode_tokens_per_s"]) == \
        (option["startup"], option["context"], option["decode_tokens_per_s"])


def test_ollama_options_are_modelfile_parameters_and_its_variables(quants: Path) -> None:
    model = str(quants / "Llama-3.1-8B-Instruct-Q4_K_M.gguf")
    (v,) = _json("check", model, "--engine", "ollama", "--gpu", SMALL, "--context", "32768")["verdicts"]
    kinds = _by_kind(v["options"])
    assert kinds["as-asked"][0]["flags"] == ["PARAMETER num_ctx 32768"]
    assert kinds["context"][0]["flags"] == [f"PARAMETER num_ctx {kinds['context'][0]['context']}"]
    assert kinds["kv-cache"][0]["flags"] == ["OLLAMA_KV_CACHE_TYPE=q8_0"]
    # Ollama's scheduler picks the layers itself: never llama.cpp's -ngl in its options
    assert all("-ngl" not in json.dumps(o) for o in v["options"])
    assert kinds["as-asked"][0]["offload"].endswith("layers on the GPU")


def test_vllm_options_say_its_flags_and_a_tp_deployment_that_starts(awq: Path) -> None:
    """AWQ Qwen-7B on an 8 GB card at 32k does not start on vLLM 0.11: the context that starts; and 2 GPUs only
    with a budget their free memory allows (vLLM refuses a utilization above the free memory of each GPU)."""
    data = _json("check", str(awq), "--engine", "vllm==0.11.0", "--gpu", SMALL, "--context", "32768")
    (v,) = data["verdicts"]
    assert v["startup"]["outcome"] == "does-not-start"
    kinds = _by_kind(v["options"])
    (ctx,) = kinds["context"]
    assert ctx["flags"][0] == "--max-model-len" and ctx["startup"] == "starts"
    (more,) = kinds["more-gpus"]
    assert more["flags"] == ["--tensor-parallel-size", "2", "--gpu-memory-utilization", "0.8"]
    assert more["startup"] == "starts" and more["gpus"] == 2
    # asked so, it starts (the same answer)
    (again,) = _json("check", str(awq), "--engine", "vllm==0.11.0", "--gpu", SMALL, "--context", "32768",
                     "--tp", "2", "--gpu-memory-utilization", "0.8")["verdicts"]
    assert again["startup"]["outcome"] == "starts"
    assert again["memory"]["speed"]["decode_tokens_per_s"] == more["decode_tokens_per_s"]


def test_a_deployment_that_fits_has_no_options(quants: Path) -> None:
    (v,) = _json("check", str(quants / "Llama-3.1-8B-Instruct-Q4_K_M.gguf"), "--engine", "llama.cpp", "--gpu",
                 "rtx-4090", "--context", "32768")["verdicts"]
    assert v["startup"]["outcome"] == "starts" and "options" not in v


def test_the_options_text_fits_the_terminal_and_never_cuts_a_setting(quants: Path) -> None:
    model = str(quants / "Llama-3.1-8B-Instruct-Q4_K_M.gguf")
    args = ("check", model, "--engine", "llama.cpp", "--gpu", SMALL, "--context", "32768")
    code, piped = _invoke(*args)
    assert code == 0
    block = piped.split("  options:   ")[1].split("  sources:")[0].splitlines()
    assert block[0] == f"on the {SMALL} named, each judged like the deployment asked:"
    rows = block[1:]
    assert len(rows) == 6 and rows[1].startswith("             -c 15360  ")
    assert any("-m Llama-3.1-8B-Instruct-Q3_K_M.gguf (Q3_K_M, 4.01 GB)" in r for r in rows)  # whole, never cut
    assert "starts, all on the GPU (6.3 GiB); decode <= 68 tok/s at 15360" in rows[1]
    # 100 columns: each option on its own line, what it does beneath; no line over the width
    code, narrow = _invoke(*args, env={"COLUMNS": "100"})
    assert code == 0 and max(len(line) for line in narrow.splitlines()) <= 100
    lines = narrow.splitlines()
    at = lines.index("             -c 15360")
    assert lines[at + 1].startswith("                 starts, all on the GPU (6.3 GiB)")
    assert "             -m Llama-3.1-8B-Instruct-Q3_K_M.gguf (Q3_K_M, 4.01 GB)" in lines


def test_the_markdown_report_has_the_options_table(quants: Path) -> None:
    code, out = _invoke("check", str(quants / "Llama-3.1-8B-Instruct-Q4_K_M.gguf"), "--engine", "llama.cpp",
                        "--gpu", SMALL, "--context", "32768", "--format", "markdown")
    assert code == 0
    assert "#### Options: " in out and "| option | on the GPU | decode |" in out
    assert "| -ctk q4\\_0 -ctv q4\\_0 | starts, all on the GPU (5.6 GiB)" in out


def test_every_door_gets_the_same_options(quants: Path, tmp_path: Path) -> None:
    model = quants / "Llama-3.1-8B-Instruct-Q4_K_M.gguf"
    from_check = _json("check", str(model), "--engine", "llama.cpp", "--gpu", SMALL, "--context", "32768")[
        "verdicts"][0]["options"]
    policy = tmp_path / "policy.toml"
    policy.write_text(f'models = [{{ path = "{model}" }}]\n[memory]\ncontext = 32768\n'
                      f'[[targets]]\nengine = ["llama.cpp"]\ngpu = ["{SMALL}"]\n')
    gate = _json("gate", "--policy", str(policy), "--allow-outside")
    from_gate = next(v for r in gate["models"] for v in r["verdicts"])["options"]
    (api,) = run(CheckRequest(str(model), ("llama.cpp",), (SMALL,), Deploy(context=32768, batch=1),
                              memory=True)).verdicts
    assert from_check == from_gate == [o.to_json() for o in api.options]


def test_the_capacity_is_in_the_text(awq: Path) -> None:
    """Item 5: the KV pool in tokens and vLLM's own concurrency figure, in the text."""
    code, out = _invoke("check", str(awq), "--engine", "vllm==0.11.0", "--gpu", "a100-40gb", "--context", "32768")
    assert code == 0
    (v,) = _json("check", str(awq), "--engine", "vllm==0.11.0", "--gpu", "a100-40gb", "--context", "32768")[
        "verdicts"]
    tokens = v["memory"]["kv_available_tokens"]
    startup = next(line for line in out.splitlines() if line.lstrip().startswith("start-up:"))
    assert f"GiB, {tokens:,} tokens; at most" in startup and tokens > 500_000
    assert f"at most {tokens // 32768} requests of 32768 tokens at once" in startup
    assert f'vLLM logs "Maximum concurrency for 32,768 tokens per request: {tokens / 32768:.2f}x"' in startup


@pytest.mark.parametrize("engine,gpu,context", [("vllm==0.11.0", "a100-40gb", 32768),
                                                ("llama.cpp", "rtx-4090", 131072), ("sglang", "h100", 32768)])
def test_a_memory_line_at_the_engines_default_without_a_setting(awq: Path, quants: Path, engine: str, gpu: str,
                                                                context: int) -> None:
    """Item 5: no --context or --batch: the memory line at the engine's default context, its start-up reported
    (not judged: the kernels decide the exit code)."""
    model = str(quants / "Llama-3.1-8B-Instruct-Q4_K_M.gguf") if engine == "llama.cpp" else str(awq)
    code, out = _invoke("check", model, "--engine", engine, "--gpu", gpu)
    assert code == 0
    (v,) = _json("check", model, "--engine", engine, "--gpu", gpu)["verdicts"]
    assert v["memory"]["context"] == context and v["startup"]["judged"] is False
    assert "  memory:    needs " in out
    assert "  start-up:  at the engine's defaults (reported; no setting asked, so not judged): " in out


def test_a_symlinked_quant_is_read_as_a_sibling(quants: Path, tmp_path: Path) -> None:
    """Options read the other quants' headers where the model sits, symlinks included (a models folder of links)."""
    folder = tmp_path / "links"
    folder.mkdir()
    for name in ("Llama-3.1-8B-Instruct-Q4_K_M.gguf", "Llama-3.1-8B-Instruct-Q3_K_M.gguf"):
        (folder / name).symlink_to(quants / name)
    (folder / "notes.txt").write_text("not a model")
    (v,) = _json("check", str(folder / "Llama-3.1-8B-Instruct-Q4_K_M.gguf"), "--engine", "llama.cpp", "--gpu",
                 SMALL, "--context", "32768")["verdicts"]
    (quant,) = _by_kind(v["options"])["quant"]
    assert quant["model"] == str(folder / "Llama-3.1-8B-Instruct-Q3_K_M.gguf")


def test_a_pinned_split_that_is_all_that_keeps_it_off_the_gpu_gets_every_layer_on_it(quants: Path) -> None:
    """`-ngl 0` on a 24 GB card: the one option is every layer on the GPU (no KV type or quant is needed); on the
    8 GB card at 32k `-ngl 33` alone does not start, so it is not offered, and the other options carry it."""
    model = str(quants / "Llama-3.1-8B-Instruct-Q4_K_M.gguf")
    (v,) = _json("check", model, "--engine", "llama.cpp", "--gpu", "rtx-4090", "--context", "8192", "-ngl", "0")[
        "verdicts"]
    assert [(o["kind"], o["flags"], o["startup"]) for o in v["options"]] == [
        ("as-asked", ["-c", "8192", "-ngl", "0"], "offloaded"), ("gpu-layers", ["-ngl", "33"], "starts")]
    (v,) = _json("check", model, "--engine", "llama.cpp", "--gpu", SMALL, "--context", "32768", "-ngl", "20")[
        "verdicts"]
    kinds = _by_kind(v["options"])
    assert "gpu-layers" not in kinds and all(o["startup"] != "does-not-start" for o in v["options"])
    assert kinds["context"][0]["flags"][-2:] == ["-ngl", "33"] and kinds["context"][0]["startup"] == "starts"
    assert kinds["kv-cache"][0]["flags"] == ["-ctk", "q8_0", "-ctv", "q8_0", "-ngl", "33"]
