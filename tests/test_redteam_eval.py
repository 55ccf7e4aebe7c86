"""The red team's eval and input findings (issue #34) as regression tests through the real CLI.

Each test builds the hostile input the finding describes (a GGUF that aborts llama.cpp's loader, a forged cache
entry, a ReDoS pattern, a FIFO where a file should be ...) and asserts the specific outcome: the exit code, the one
error line, the figure that must not change, the file that must not be read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from support.eval_helpers import task_file, tiny_gguf, tiny_reference
from support.gate_helpers import qcheck

pytestmark = pytest.mark.slow


def _errors(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("qcheck: error:")]


def _one_error(done, *needles: str) -> str:
    """The run ended with exit 2 and exactly one error line holding every needle, no traceback."""
    assert done.returncode == 2, (done.returncode, done.stderr[-3000:])
    lines = _errors(done.stderr)
    assert len(lines) == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


# --------------------------------------------------------------------- 1. hostile GGUFs never reach llama.cpp
def _aborting_gguf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Q8_0 GGUF that llama.cpp's loader aborts on (``llama.expert_count`` 100000 > LLAMA_MAX_EXPERTS: a
    GGML_ASSERT, SIGABRT) and whose ``general.name`` holds a 0xff byte, which qcheck refuses."""
    import gguf

    from support.gguf_export import export_gguf

    add_vocab_size = gguf.GGUFWriter.add_vocab_size

    def with_experts(self, size):
        add_vocab_size(self, size)
        self.add_uint32("llama.expert_count", 100_000)

    monkeypatch.setattr(gguf.GGUFWriter, "add_vocab_size", with_experts)
    path = export_gguf(tiny_reference(), tmp_path / "hostile.gguf", "Q8_0")
    data = bytearray(path.read_bytes())
    key = data.index(b"general.name")
    data[key + len(b"general.name") + 4 + 8] = 0xFF  # first byte of the value (after its type and length)
    path.write_bytes(bytes(data))
    return path


@pytest.mark.llamacpp
def test_a_gguf_qcheck_refuses_never_reaches_llama_cpp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("llama_cpp")
    bad = _aborting_gguf(tmp_path, monkeypatch)
    inspected = qcheck("inspect", str(bad))
    assert inspected.returncode == 2 and "not valid UTF-8" in inspected.stderr
    done = qcheck("eval", "-r", str(tiny_reference()), "-c", f"t=llamacpp:{bad}", "--tasks", str(task_file()),
                  "--max-items", "1", "--cache-dir", str(tmp_path / "cache"), "--json")
    # had llama.cpp's loader seen the file, the process would have died of SIGABRT (return code -6), not exit 2
    _one_error(done, "general.name", "not valid UTF-8")
    assert done.stdout == ""


def test_a_vetted_gguf_changed_before_the_load_is_refused(tmp_path: Path) -> None:
    from qcheck.errors import InputError
    from qcheck.eval.native import still_vetted, vet

    path = tmp_path / "m.gguf"
    path.write_bytes(tiny_gguf("Q8_0").read_bytes())
    vetted = vet(str(path))
    assert still_vetted(vetted) == str(path)
    with open(path, "r+b") as fh:  # rewritten in place after the inspection: another inode state
        fh.seek(0, os.SEEK_END)
        fh.write(b"\0")
    with pytest.raises(InputError, match="changed after qcheck inspected it"):
        still_vetted(vetted)
    fifo = tmp_path / "fifo.gguf"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        vet(str(fifo))


#: calls that hand a GGUF to a loader qcheck does not control: llama-cpp-python, transformers' GGUF path (gguf-py's
#: GGUFReader, which memory-maps the file and trusts its counts)
NATIVE_LOADERS = ("llama_cpp.Llama(", ".Llama(model_path", "gguf_file=", "GGUFReader(", "load_gguf_checkpoint(")


def test_every_module_that_calls_a_gguf_loader_vets_the_file_first() -> None:
    package = Path(__file__).resolve().parents[1] / "qcheck"
    callers = {}
    for path in sorted(package.rglob("*.py")):
        code = "\n".join(line for line in path.read_text(encoding="utf-8").splitlines()
                         if not line.lstrip().startswith("#"))
        hits = [needle for needle in NATIVE_LOADERS if needle in code]
        if hits:
            callers[path.relative_to(package).as_posix()] = ("still_vetted(" in code, hits)
    assert "eval/runners/llamacpp.py" in callers  # the scan finds the one known caller
    assert {name: hits for name, (vetted, hits) in callers.items() if not vetted} == {}


# --------------------------------------------------------------------- 2. planted reference-cache entries
TEXT_TASKS = [{"id": f"t{i}", "kind": "text", "text": text} for i, text in enumerate((
    "The quick brown fox jumps over the lazy dog, and the dog sleeps on.",
    "def add(a, b):\n    return a + b  # the sum of two numbers",
    "Quantisation maps weights to fewer bits; the loss is measured in nats per token."))]


def _tasks(tmp_path: Path, lines: list[dict] = TEXT_TASKS) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def _dequantised_reference(gguf: Path, dest: Path) -> Path:
    """The tiny reference's directory with the GGUF's dequantised weights: what an attacker computes planted rows
    from (the candidate itself as the reference)."""
    import shutil

    from safetensors.torch import save_file

    from qcheck.eval.simulate import simulated_state_dict

    shutil.copytree(tiny_reference(), dest)
    state, _ = simulated_state_dict(str(gguf), str(tiny_reference()))
    save_file({k: v.contiguous() for k, v in state.items()}, str(dest / "model.safetensors"), metadata={"format": "pt"})
    return dest


def _eval_json(*args: str):
    done = qcheck("eval", *args, "--json", "--no-progress")
    return done, (json.loads(done.stdout) if done.stdout.strip() else None)


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A victim's cache entry (the tiny reference R, its Q8_0 GGUF C: fails --max-kld 1e-6) and an attacker's entry
    for the same tasks computed with C's dequantised weights as the reference, in another cache folder."""
    import shutil

    root = tmp_path_factory.mktemp("planted")
    cand = tiny_gguf("Q8_0")
    tasks = _tasks(root)
    common = ["-c", f"c={cand}", "--tasks", str(tasks), "--simulate-engine", "weights"]
    victim = ["-r", str(tiny_reference()), *common, "--max-kld", "0.000001", "--cache-dir", str(root / "victim")]
    done, first = _eval_json(*victim)
    assert done.returncode == 1 and first is not None and not first["cache"]["hit"], done.stderr[-2000:]
    attacker, forged = _eval_json("-r", str(_dequantised_reference(cand, root / "attacker-ref")), *common,
                                  "--cache-dir", str(root / "attacker"))
    assert attacker.returncode == 0 and forged["candidates"][0]["metrics"]["kld_mean"] < 1e-6, attacker.stderr
    [entry] = (root / "victim" / "eval").glob("ref-*")
    [theirs] = (root / "attacker" / "eval").glob("ref-*")
    shutil.copytree(entry, root / "pristine")
    return {"victim": victim, "kld": first["candidates"][0]["metrics"]["kld_mean"], "entry": entry,
            "theirs": theirs, "pristine": root / "pristine"}


def _restore(planted: dict) -> Path:
    import shutil

    entry = planted["entry"]
    shutil.rmtree(entry, ignore_errors=True)
    if entry.is_symlink():
        entry.unlink()
    shutil.copytree(planted["pristine"], entry)
    return entry


def _plant_rows(entry: Path, theirs: Path) -> None:
    import shutil

    for name in ("rows.bin", "index.json", "generations.json"):
        shutil.copyfile(theirs / name, entry / name)


def _plant_whole_entry(entry: Path, theirs: Path) -> None:
    """The attacker's entry, auth.json included (signed by the same user's key, for another key), under the
    victim's name."""
    import shutil

    shutil.rmtree(entry)
    shutil.copytree(theirs, entry)


def _fifo_rows(entry: Path, theirs: Path) -> None:
    (entry / "rows.bin").unlink()
    os.mkfifo(entry / "rows.bin")


def _zero_generations(entry: Path, theirs: Path) -> None:
    (entry / "generations.json").unlink()
    (entry / "generations.json").symlink_to("/dev/zero")


def _truncated_rows(entry: Path, theirs: Path) -> None:
    data = (entry / "rows.bin").read_bytes()
    (entry / "rows.bin").write_bytes(data[: len(data) // 2])


def _garbage_meta(entry: Path, theirs: Path) -> None:
    (entry / "meta.json").write_bytes(b"\xff{not json")


def _mistyped_index(entry: Path, theirs: Path) -> None:
    index = json.loads((entry / "index.json").read_text())
    (entry / "index.json").write_text(json.dumps({k: ["0", None] for k in index}))


def _group_writable(entry: Path, theirs: Path) -> None:
    _plant_rows(entry, theirs)
    entry.chmod(0o770)


@pytest.mark.parametrize("tamper,why", [
    (_plant_rows, "is not what the entry was signed with"),
    (_plant_whole_entry, "tag does not verify"),
    (_fifo_rows, "rows.bin"),
    (_zero_generations, "generations.json"),
    (_group_writable, "writable by group or others"),
    (_truncated_rows, "rows.bin is not what the entry was signed with"),
    (_garbage_meta, "meta.json is not what the entry was signed with"),
    (_mistyped_index, "index.json is not what the entry was signed with"),
])
def test_a_planted_or_broken_cache_entry_is_recomputed_not_trusted(planted: dict, tamper, why: str) -> None:
    entry = _restore(planted)
    tamper(entry, planted["theirs"])
    done, out = _eval_json(*planted["victim"])
    # the planted rows would make the candidate pass (KLD < 1e-6, exit 0); the true figure is recomputed
    assert done.returncode == 1, done.stderr[-2000:]
    assert out["candidates"][0]["metrics"]["kld_mean"] == pytest.approx(planted["kld"], rel=1e-6)
    assert out["cache"]["hit"] is False
    [note] = [n for n in out["notes"] if "not used" in n]
    assert why in note and "computed again" in note
    if tamper is _plant_rows:
        done, again = _eval_json(*planted["victim"])  # the entry was replaced by a good one: a hit now
        assert done.returncode == 1 and again["cache"]["hit"] is True


def test_the_cache_key_is_private_and_a_key_others_may_read_is_never_used(tmp_path: Path) -> None:
    import stat

    key = tmp_path / "config" / "qcheck" / "cache-key"
    args = ["-r", str(tiny_reference()), "-c", f"c={tiny_gguf('Q8_0')}", "--tasks", str(_tasks(tmp_path)),
            "--cache-dir", str(tmp_path / "cache"), "--json", "--no-progress"]

    def run() -> dict:
        done = qcheck("eval", *args, QCHECK_CACHE_KEY_FILE="", XDG_CONFIG_HOME=str(tmp_path / "config"))
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout)

    assert [run()["cache"]["hit"], run()["cache"]["hit"]] == [False, True]
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    assert len(bytes.fromhex(key.read_text())) == 32
    [entry] = (tmp_path / "cache" / "eval").glob("ref-*")
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in entry.iterdir()} == dict.fromkeys(
        ("auth.json", "generations.json", "index.json", "meta.json", "rows.bin"), 0o600)
    key.chmod(0o644)
    for _ in range(2):  # neither this run's entry nor the earlier one is used while the key may be read by others
        out = run()
        assert out["cache"]["hit"] is False
        assert any("may be read by group or others" in n and "not reused" in n for n in out["notes"]), out["notes"]


# --------------------------------------------------------------------- 3. endpoint results replayed
@pytest.mark.llamacpp
def test_endpoint_results_resume_only_the_named_run_of_the_same_server(tmp_path: Path) -> None:
    """A good run against a server, then the same URL and model id serving other numbers (a Q4_0 GGUF instead of
    Q8_0): a new run measures the new server; ``--resume`` of the good run is refused; nothing is kept under
    ``--no-cache``, and everything lives under ``--cache-dir``."""
    pytest.importorskip("llama_cpp")
    import re

    from transformers import AutoTokenizer

    from support.engine_fake_server import FakeEngine, FakeServer

    tok = AutoTokenizer.from_pretrained(str(tiny_reference()))
    q8, q4 = FakeEngine(str(tiny_gguf("Q8_0")), tok), FakeEngine(str(tiny_gguf("Q4_0")), tok)
    home = tmp_path / "home-cache"
    try:
        with FakeServer(q8) as srv:
            def run(*extra: str):
                done = qcheck("eval", "-r", str(tiny_reference()), "-t", str(_tasks(tmp_path)), "--endpoint",
                              f"e={srv.url}", "--cache-dir", str(tmp_path / "cache"), "--json", "--max-kld", "0.05",
                              *extra, QCHECK_CACHE_DIR=str(home))
                out = json.loads(done.stdout) if done.stdout.strip() else None
                return done, out["candidates"][0] if out else None

            done, good = run()
            assert done.returncode == 0, done.stderr[-2000:]
            run_id = re.search(r"kept as run (\S+); after an interruption, continue with --resume \1",
                               done.stderr).group(1)
            [state] = (tmp_path / "cache" / "eval" / "endpoints" / run_id).glob("endpoint-*.jsonl")
            done, resumed = run("--resume", run_id)  # the same server: every request comes from the run's file
            assert done.returncode == 0 and resumed["metrics"]["kld_mean"] == good["metrics"]["kld_mean"]
            assert any(n.startswith(f"resumed: {len(TEXT_TASKS)} request(s)") for n in resumed["notes"])
            srv.engine = q4  # redeployed under the same model id
            done, fresh = run()
            assert done.returncode == 1 and fresh["metrics"]["kld_mean"] > 10 * good["metrics"]["kld_mean"]
            assert not any("resumed" in n for n in fresh["notes"])
            done, _ = run("--resume", run_id)
            _one_error(done, f"--resume {run_id}", "is not the server these results were recorded from",
                       "for the probe changed")
            done, _ = run("--no-cache")
            assert done.returncode == 1 and "kept as run" not in done.stderr
            lines = state.read_text().splitlines()  # a planted record (no valid MAC) is not a record
            record = json.loads(lines[1])
            record["value"]["t"] = [0.0 for _ in record["value"]["t"]]
            state.write_text("\n".join([*lines, json.dumps(record)]) + "\n")
            srv.engine = q8
            done, again = run("--resume", run_id)
            assert done.returncode == 0 and again["metrics"]["kld_mean"] == good["metrics"]["kld_mean"]
        assert not home.exists()  # nothing under $QCHECK_CACHE_DIR when --cache-dir names the cache
        done, _ = run("--resume", "no-such-run")
        _one_error(done, "--resume no-such-run: no such run")
    finally:
        q8.close()
        q4.close()


# --------------------------------------------------------------------- 8. unreadable config.json
def _config_fifo(d: Path) -> None:
    (d / "config.json").unlink()
    os.mkfifo(d / "config.json")


def _config_dev_zero(d: Path) -> None:
    (d / "config.json").unlink()
    (d / "config.json").symlink_to("/dev/zero")


def _config_loop(d: Path) -> None:
    (d / "config.json").unlink()
    (d / "config.json").symlink_to("config.json")


def _config_broken_link(d: Path) -> None:
    (d / "config.json").unlink()
    (d / "config.json").symlink_to(d / "gone.json")


def _index_fifo(d: Path) -> None:
    (d / "model.safetensors").rename(d / "model-00001-of-00001.safetensors")
    os.mkfifo(d / "model.safetensors.index.json")


@pytest.mark.parametrize("break_it,expected", [
    (_config_fifo, "config.json: not a regular file (a FIFO)"),
    (_config_dev_zero, "config.json: not a regular file (a character device)"),
    (_config_loop, "config.json: unreadable: too many levels of symbolic links"),
    (_config_broken_link, "config.json: unreadable: a broken symbolic link"),
    (_index_fifo, "model.safetensors.index.json: not a regular file (a FIFO)"),
])
def test_an_unreadable_config_or_index_is_one_error_line(tmp_path: Path, break_it, expected: str) -> None:
    from support.gate_helpers import bf16_dir

    model = bf16_dir(tmp_path / "m")
    break_it(model)
    for command in (["check", str(model), "--engine", "vllm", "--gpu", "h100"], ["inspect", str(model)]):
        done = qcheck(*command, matrix=False)  # a FIFO read would hang (the helper's timeout), /dev/zero never ends
        _one_error(done, expected)


def test_a_missing_config_json_is_never_a_silent_runs(tmp_path: Path) -> None:
    from support.gate_helpers import bf16_dir

    model = bf16_dir(tmp_path / "m")
    (model / "config.json").unlink()
    done = qcheck("check", str(model), "--engine", "vllm", "--gpu", "h100", "--json", matrix=False)
    assert done.returncode == 1, done.stderr
    out = json.loads(done.stdout)
    assert any(w.startswith("no config.json beside the safetensors weights") for w in out["inspection"]["warnings"])
    [verdict] = out["verdicts"]
    assert verdict["status"] == "unknown"
    assert any("no config.json: whether vLLM loads this checkpoint is not known" in r for r in verdict["reasons"])


# --------------------------------------------------------------------- 4. the reference cache key
def _sharded_reference(dest: Path) -> Path:
    """The tiny reference with its weights in ``sub/w.safetensors``, named by model.safetensors.index.json."""
    import shutil

    from safetensors import safe_open

    shutil.copytree(tiny_reference(), dest)
    (dest / "sub").mkdir()
    (dest / "model.safetensors").rename(dest / "sub" / "w.safetensors")
    with safe_open(str(dest / "sub" / "w.safetensors"), "np") as f:
        names = list(f.keys())
    (dest / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": dict.fromkeys(names, "sub/w.safetensors")}))
    return dest


def test_swapped_weights_in_a_subfolder_shard_are_not_served_from_the_cache(tmp_path: Path) -> None:
    import shutil

    ref = _sharded_reference(tmp_path / "ref")
    cand = tiny_gguf("Q8_0")
    args = ["-r", str(ref), "-c", f"c={cand}", "--tasks", str(_tasks(tmp_path)), "--simulate-engine", "weights",
            "--cache-dir", str(tmp_path / "cache")]
    done, first = _eval_json(*args)
    assert done.returncode == 0 and not first["cache"]["hit"], done.stderr[-2000:]
    # the shard now holds the candidate's dequantised weights: the truth is a KLD of ~0
    shutil.copyfile(_dequantised_reference(cand, tmp_path / "q8-ref") / "model.safetensors", ref / "sub" / "w.safetensors")
    done, second = _eval_json(*args)
    assert done.returncode == 0 and second["cache"]["hit"] is False, second["cache"]
    assert first["candidates"][0]["metrics"]["kld_mean"] > 1e-4 > abs(second["candidates"][0]["metrics"]["kld_mean"])


def _edit_generation_config(ref: Path) -> None:
    cfg = json.loads((ref / "generation_config.json").read_text())
    cfg["temperature"] = 0.5
    (ref / "generation_config.json").write_text(json.dumps(cfg))


def _edit_tokenizer_config(ref: Path) -> None:
    cfg = json.loads((ref / "tokenizer_config.json").read_text())
    cfg["model_max_length"] = 77
    (ref / "tokenizer_config.json").write_text(json.dumps(cfg))


def _add_chat_template(ref: Path) -> None:
    (ref / "chat_template.jinja").write_text("{{ messages }}")


def _add_adapter(ref: Path) -> None:
    (ref / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4}))


def _rewrite_index(ref: Path) -> None:
    index = json.loads((ref / "model.safetensors.index.json").read_text())
    index["metadata"] = {"total_size": 1}
    (ref / "model.safetensors.index.json").write_text(json.dumps(index))


def _retouch_shard(ref: Path) -> None:
    shard = ref / "sub" / "w.safetensors"
    os.utime(shard, ns=(shard.stat().st_atime_ns, shard.stat().st_mtime_ns + 1_000_000_000))


@pytest.mark.parametrize("change", [_edit_generation_config, _edit_tokenizer_config, _add_chat_template, _add_adapter,
                                    _rewrite_index, _retouch_shard])
def test_the_reference_fingerprint_covers_every_file_the_loader_reads(tmp_path: Path, change) -> None:
    from qcheck.eval.fingerprint import model_fingerprint

    ref = _sharded_reference(tmp_path / "ref")
    before = model_fingerprint(str(ref))
    assert model_fingerprint(str(ref)) == before
    change(ref)
    assert model_fingerprint(str(ref)) != before


def test_the_reference_fingerprint_refuses_what_the_loader_must_not_read(tmp_path: Path) -> None:
    from qcheck.errors import InputError
    from qcheck.eval.fingerprint import model_fingerprint

    ref = _sharded_reference(tmp_path / "ref")
    os.mkfifo(ref / "tokenizer.model")
    with pytest.raises(InputError, match=r"tokenizer\.model: not a regular file \(a FIFO\)"):
        model_fingerprint(str(ref))
    (ref / "tokenizer.model").unlink()
    (ref / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "../outside.safetensors"}}))
    with pytest.raises(InputError, match="escapes the model directory"):
        model_fingerprint(str(ref))


# --------------------------------------------------------------------- 5. an adapter beside the reference
def _with_adapter(dest: Path) -> Path:
    """The tiny reference plus a PEFT LoRA adapter (random, large enough to change every prediction) in its folder,
    its base_model_name_or_path naming the folder itself."""
    import shutil

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    shutil.copytree(tiny_reference(), dest)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(str(dest)),
                           LoraConfig(r=4, lora_alpha=64, target_modules=["q_proj", "v_proj", "down_proj"],
                                      init_lora_weights=False))
    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_" in name:
                param.normal_(0, 0.5)
    model.save_pretrained(str(dest / "adapter"))
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        (dest / "adapter" / name).rename(dest / name)
    shutil.rmtree(dest / "adapter")
    config = json.loads((dest / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(dest)
    (dest / "adapter_config.json").write_text(json.dumps(config))
    return dest


def test_an_adapter_beside_the_reference_is_said_and_left_out_unless_asked(tmp_path: Path) -> None:
    pytest.importorskip("peft")
    ref = _with_adapter(tmp_path / "ref")
    tasks = _tasks(tmp_path)
    q8 = f"q8={tiny_gguf('Q8_0')}"
    common = ["--tasks", str(tasks), "--cache-dir", str(tmp_path / "cache")]
    done, plain = _eval_json("-r", str(tiny_reference()), "-c", q8, *common)
    assert done.returncode == 0, done.stderr[-2000:]
    done, out = _eval_json("-r", str(ref), "-c", q8, "-c", f"self={ref}", *common)
    assert done.returncode == 0, done.stderr[-2000:]
    q8_run, self_run = out["candidates"]
    # the base alone: exactly the plain reference's numbers (merged silently, top-1 fell from ~90 % to 0 %)
    assert q8_run["metrics"]["kld_mean"] == pytest.approx(plain["candidates"][0]["metrics"]["kld_mean"], rel=1e-6)
    assert q8_run["metrics"]["top1_agreement"] == plain["candidates"][0]["metrics"]["top1_agreement"] > 0.5
    assert out["reference"]["adapter"] == {"files": ["adapter_config.json", "adapter_model.safetensors"],
                                           "applied": False}
    assert any("holds a PEFT adapter" in n and "not applied" in n and "--reference-adapter" in n for n in out["notes"])
    assert any("candidate folder holds a PEFT adapter" in n for n in self_run["notes"])
    assert abs(self_run["metrics"]["kld_mean"]) < 1e-6  # the candidate's own weights: the base
    done, merged = _eval_json("-r", str(ref), "-c", q8, "--reference-adapter", *common)
    assert done.returncode == 0, done.stderr[-2000:]
    assert merged["reference"]["adapter"]["applied"] is True and merged["cache"]["hit"] is False
    assert merged["candidates"][0]["metrics"]["top1_agreement"] < 0.2
    assert "FutureWarning" not in done.stderr


# --------------------------------------------------------------------- 6. regular expressions in task files
#: classic ReDoS patterns (nested and overlapping quantifiers, an e-mail validator) and inputs that make a
#: backtracking engine take exponential time on them
REDOS = [
    ("^(a+)+$", "a" * 64 + "!"),
    ("^(a|aa)+$", "a" * 64 + "!"),
    ("^(a|a?)+$", "a" * 64 + "!"),
    ("^(\\w+\\s?)*$", "word " * 40 + "!"),
    ("(.*a){12}x", "a" * 64),
    ("^([a-zA-Z0-9])(([\\-.]|[_]+)?([a-zA-Z0-9]+))*(@){1}[a-z0-9]+[.]{1}(([a-z]{2,3})|([a-z]{2,3}[.]{1}[a-z]{2,3}))$",
     "a" * 64 + "@"),
]


def _gate_project(root: Path, tasks: Path) -> Path:
    """A repository whose policy's [quality] reads ``tasks`` (the task file is read before any model)."""
    import shutil

    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(tiny_gguf("Q8_0"), root / "q8.gguf")
    shutil.copytree(tiny_reference(), root / "ref")
    if tasks.parent != root:
        shutil.copy(tasks, root / "tasks.jsonl")
    (root / "qcheck.toml").write_text('models = ["q8.gguf"]\n[[targets]]\nengine = "tinycpp"\ngpu = "cpu"\n'
                                      '[quality]\nreference = "ref"\ntasks = ["tasks.jsonl"]\ncache-dir = "cache"\n'
                                      'max-kld = 1.0\n')
    return root


def _eval_and_gate(tmp_path: Path, lines: list[dict], *expected: str) -> None:
    """``qcheck eval`` and ``qcheck gate`` both refuse the task file with one line holding ``expected``."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    tasks = _tasks(tmp_path, lines)
    _one_error(qcheck("eval", "-r", str(tiny_reference()), "-c", f"c={tiny_gguf('Q8_0')}", "--tasks", str(tasks),
                      "--no-cache"), *expected)
    project = _gate_project(tmp_path / "repo", tasks)
    _one_error(qcheck("gate", cwd=project), *expected)


@pytest.mark.parametrize("pattern,text", REDOS)
def test_a_redos_pattern_in_a_schema_is_matched_in_bounded_time(tmp_path: Path, pattern: str, text: str) -> None:
    """The item's own expected value is checked against its schema when the file is read: Python's re never returned
    (killed at 60 s in the report); RE2 answers at once, and the mismatch is the one error line."""
    line = {"id": "j", "kind": "generate", "prompt": "p", "match": "json", "expected": text,
            "schema": {"type": "string", "pattern": pattern}}
    _eval_and_gate(tmp_path, [line], "expected: does not satisfy the item's own schema", "does not match")


def test_redos_patterns_as_regex_items_and_property_patterns_run_bounded() -> None:
    from qcheck.eval.jsonmatch import check_output, check_schema
    from qcheck.eval.tasks import parse_jsonl

    for pattern, text in REDOS:
        [item] = parse_jsonl(json.dumps({"id": "r", "kind": "generate", "prompt": "p", "expected": pattern,
                                         "match": "regex"}).encode(), "t.jsonl", "t")
        assert item.is_correct(text) is False and item.is_correct(text.rstrip("!@x") if "a+" in pattern else "") in (
            True, False)
        schema = {"type": "object", "patternProperties": {pattern: {"type": "integer"}}, "additionalProperties": False}
        assert check_schema(schema) is None
        outcome = check_output(json.dumps({text: 1}), json.dumps(schema, sort_keys=True), None)
        assert not outcome.valid and "not allowed" in outcome.problem
    # formats are annotations: no format validator (some of which are regular expressions) runs on outputs
    schema = {"type": "string", "format": "email"}
    assert check_output(json.dumps("@" * 100_000), json.dumps(schema), None).valid


@pytest.mark.parametrize("pattern,why", [
    ("(a)\\1", "RE2 has no backreferences or look-around"),
    ("(?=a)a", "RE2 has no backreferences or look-around"),
    ("(?:[a-z]{500}){2}", "RE2 instructions, over 1000"),
    ("a" * 1001, "characters long, over 1000"),
])
def test_a_pattern_qcheck_cannot_bound_is_refused_when_the_file_is_read(tmp_path: Path, pattern: str, why: str) -> None:
    lines = [{"id": "r", "kind": "generate", "prompt": "p", "expected": pattern, "match": "regex"}]
    _eval_and_gate(tmp_path / "regex", lines, "expected: regular expression", why)
    schema_line = {"id": "j", "kind": "generate", "prompt": "p", "match": "json",
                   "schema": {"type": "object", "properties": {"x": {"type": "string", "pattern": pattern}}}}
    _eval_and_gate(tmp_path / "schema", [schema_line], "schema: pattern", why)


def test_a_long_output_is_not_matched_past_the_bound() -> None:
    from qcheck.eval.patterns import MAX_STEPS, compile_pattern
    from qcheck.eval.tasks import parse_jsonl

    [item] = parse_jsonl(json.dumps({"id": "r", "kind": "generate", "prompt": "p", "expected": "[a-z]{900}!",
                                     "match": "regex"}).encode(), "t.jsonl", "t")
    limit = MAX_STEPS // compile_pattern("[a-z]{900}!").program
    assert item.is_correct("b" * 900 + "!")
    assert item.is_correct("a" * (limit - 1000) + "b" * 900 + "!")
    assert not item.is_correct("a" * (limit + 1) + "b" * 900 + "!")  # within RE2's reach, past qcheck's bound


# --------------------------------------------------------------------- 9. task files: one reader, regular files only
def _fifo_in_folder(folder: Path) -> Path:
    os.mkfifo(folder / "b-fifo.jsonl")
    return folder


def _dev_zero(folder: Path) -> Path:
    (folder / "zero.jsonl").symlink_to("/dev/zero")  # read whole, it never ends: memory ran out
    return folder


@pytest.mark.parametrize("make,expected", [
    (_fifo_in_folder, "b-fifo.jsonl: not a regular file (a FIFO)"),
    (_dev_zero, "zero.jsonl: not a regular file (a character device)"),
])
def test_a_task_file_that_is_not_a_regular_file_is_one_error_line(tmp_path: Path, make, expected: str) -> None:
    folder = tmp_path / "repo"
    folder.mkdir()
    _tasks(folder)
    target = make(folder)
    _one_error(qcheck("eval", "-r", str(tiny_reference()), "-c", f"c={tiny_gguf('Q8_0')}", "--tasks", str(target),
                      "--no-cache"), expected)
    project = _gate_project(folder, folder / "tasks.jsonl")
    policy = (project / "qcheck.toml").read_text()
    (project / "qcheck.toml").write_text(policy.replace('tasks = ["tasks.jsonl"]', 'tasks = ["."]'))
    _one_error(qcheck("gate", "--allow-outside", cwd=project), expected.split(":")[0])


@pytest.mark.parametrize("raw,expected", [
    ('{"id": "s", "kind": "text", "text": "half a pair \\ud800 here"}', "lone UTF-16 surrogate"),
    ('{"id": "m", "kind": "generate", "prompt": "p", "expected": "e", "max_new_tokens": ' + "9" * 5000 + "}",
     "invalid JSON: Exceeds the limit"),
    ('{"id": "d", "kind": "text", "text": "a", "text": "b"}', "duplicate key"),
])
def test_hostile_task_values_are_one_error_line_not_internal_errors(tmp_path: Path, raw: str, expected: str) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(raw + "\n")
    _one_error(qcheck("eval", "-r", str(tiny_reference()), "-c", f"c={tiny_gguf('Q8_0')}", "--tasks", str(tasks),
                      "--no-cache"), f"{tasks}:1", expected)


# --------------------------------------------------------------------- 7. passwords in a remote reference's URL
@pytest.mark.llamacpp
def test_a_password_in_an_endpoint_url_is_written_nowhere(tmp_path: Path) -> None:
    """An endpoint reference and an endpoint candidate at http://alice:PASSWORD@host: the server gets the
    credentials; the JSON, the text output, stderr, the HTML report (its command line too) and every file of the
    cache show ``***@`` (the user name too: qcheck's one mask, ``report.sanitize.mask``, hides a URL's whole userinfo)."""
    pytest.importorskip("llama_cpp")
    from transformers import AutoTokenizer

    from support.engine_fake_server import FakeEngine, FakeServer

    secret = "s3cret-Pw-77"
    engine = FakeEngine(str(tiny_gguf("Q8_0")), AutoTokenizer.from_pretrained(str(tiny_reference())))
    try:
        with FakeServer(engine) as srv:
            url = srv.url.replace("http://", f"http://alice:{secret}@")
            args = ["-r", f"{url}#model=tiny-q8", "--reference-files", str(tiny_reference()), "-t",
                    str(_tasks(tmp_path)), "-c", f"q8={tiny_gguf('Q8_0')}", "--endpoint", url, "--endpoint-model",
                    "tiny-q8", "--cache-dir", str(tmp_path / "cache")]
            done = qcheck("eval", *args, "--json", "--report", str(tmp_path / "r.html"))
            text = qcheck("eval", *args, "--no-cache")
    finally:
        engine.close()
    assert done.returncode == 0 and text.returncode == 0, done.stderr[-2000:] + text.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["reference"]["path"] == srv.url.replace("http://", "http://***@")
    assert [c["name"] for c in out["candidates"]] == ["q8", srv.url.split("://")[1]]
    written = {"json": done.stdout, "text": text.stdout, "stderr": done.stderr + text.stderr,
               "html": (tmp_path / "r.html").read_text()}
    written.update({str(p): p.read_text(errors="replace") for p in (tmp_path / "cache").rglob("*") if p.is_file()
                    and p.suffix != ".bin"})
    assert "://***@" in written["html"] and "://***@" in written["text"]
    assert {where: body.count("alice") for where, body in written.items() if "alice" in body} == {}
    assert {where: body.count(secret) for where, body in written.items() if secret in body} == {}


# --------------------------------------------------------------------- 9. low: hostile endpoint answers
def test_a_64mb_answer_of_empty_arrays_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    """64 MB of ``[[],[],...]`` took ~1.9 GB per request to parse; now it is refused from its text (one line, exit 2)
    and the run's peak memory stays that of the reference model plus the answer's bytes."""
    import subprocess
    import sys

    from qcheck.eval.runners.http import MAX_RESPONSE_BYTES
    from support.gate_helpers import env
    from support.rawserver import RawServer, response

    body = b"[" + b",".join([b"[]"] * ((MAX_RESPONSE_BYTES - 2) // 3)) + b"]"
    assert len(body) <= MAX_RESPONSE_BYTES

    def answer(request, send) -> None:
        send(response("200 OK", body, [("Content-Type", "application/json")]))

    measure = ("import resource, subprocess, sys\n"
               "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
               "sys.stdout.write(done.stdout); sys.stderr.write(done.stderr)\n"
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
               "sys.exit(done.returncode)\n")
    with RawServer(answer) as server:
        done = subprocess.run([sys.executable, "-c", measure, sys.executable, "-m", "qcheck", "eval", "-r",
                               str(tiny_reference()), "-t", str(_tasks(tmp_path)), "--endpoint", f"e={server.url}",
                               "--endpoint-model", "m", "--retries", "0", "--no-cache"],
                              capture_output=True, text=True, env=env(), timeout=600)
    _one_error(done, "would take about", "MB of memory to parse, over the 512 MB bound")
    peak_mb = int(done.stdout.strip().splitlines()[-1]) // 1024
    assert peak_mb < 1300, peak_mb  # parsed, the answer alone was ~1.9 GB


def test_a_signed_entry_of_another_layout_is_rejected_not_an_internal_error(tmp_path: Path) -> None:
    """An entry that verifies (this user's key) but whose JSON has other shapes (an older qcheck, a bug): rejected
    with its reason, never a TypeError or KeyError later."""
    import hashlib

    import numpy as np

    from qcheck import cache_auth
    from qcheck.eval.cache import AUTH, KIND_FULL, PURPOSE, CacheReader, CacheWriter, RejectedEntry, _payload
    from qcheck.eval.runners.base import TokenScores

    key = cache_auth.load_key()
    rows = np.log(np.full((3, 8), 1 / 8, dtype=np.float32))
    for name, value, why in (("index.json", {"a": ["0", None]}, "index.json: unknown layout"),
                             ("generations.json", {"g": {"token_ids": "x"}}, "generations.json: unknown layout"),
                             ("meta.json", {"kind": "full-u16", "vocab_size": "8"}, "unknown layout")):
        writer = CacheWriter(tmp_path / name, "k", KIND_FULL, 8, None, {}, auth_key=key)
        writer.add_scores("a", TokenScores(rows[:, 0], full=rows))
        entry = writer.commit()
        (entry / name).write_text(json.dumps(value))
        auth = json.loads((entry / AUTH).read_text())
        auth["files"][name] = hashlib.sha256((entry / name).read_bytes()).hexdigest()
        auth["mac"] = cache_auth.sign(key, PURPOSE, _payload(entry.name, auth["files"]))
        (entry / AUTH).write_text(json.dumps(auth))
        with pytest.raises(RejectedEntry, match=why):
            CacheReader(entry, key)


def test_a_reference_given_as_one_file_is_fingerprinted_by_its_bytes(tmp_path: Path) -> None:
    from qcheck.eval.fingerprint import model_fingerprint

    q8, q4 = tiny_gguf("Q8_0"), tiny_gguf("Q4_0")
    assert model_fingerprint(str(q8)) == model_fingerprint(str(q8)) != model_fingerprint(str(q4))
    copy = tmp_path / "m.gguf"
    copy.write_bytes(q8.read_bytes())
    before = model_fingerprint(str(copy))
    data = bytearray(copy.read_bytes())
    data[len(data) // 2] ^= 1  # one byte of tensor data, same size: the first 64 MB differ
    copy.write_bytes(bytes(data))
    assert model_fingerprint(str(copy)) != before
