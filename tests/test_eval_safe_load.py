"""qcheck eval never runs a checkpoint's code and never unpickles (issue #17, item 2).

A real tiny transformers model is given ``auto_map`` and a Python file that would write a marker file when
imported; pickle-only and decoy references are built from the same model. qcheck must refuse each with one
``qcheck: error:`` line (exit 2) before transformers reads them, and transformers itself, called the way
qcheck calls it (``trust_remote_code=False``), must neither prompt nor run the file.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("torch")

from qcheck.cli import main
from qcheck.errors import InputError
from qcheck.eval.safe_load import NO_CODE, check_reference
from support.eval_helpers import task_file, tiny_reference

EVIL = '''
import pathlib
pathlib.Path({marker!r}).write_text("code from the checkpoint ran")
from transformers import LlamaConfig, LlamaForCausalLM
class EvilConfig(LlamaConfig):
    model_type = "evil-llama"
class EvilModel(LlamaForCausalLM):
    config_class = EvilConfig
'''


def _copy_reference(tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copytree(tiny_reference(), target)
    return target


def _with_custom_code(tmp_path: Path) -> tuple[Path, Path]:
    model = _copy_reference(tmp_path, "custom-code")
    marker = tmp_path / "MARKER"
    (model / "evil.py").write_text(EVIL.format(marker=str(marker)))
    config = json.loads((model / "config.json").read_text())
    config["model_type"] = "evil-llama"
    config["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}
    (model / "config.json").write_text(json.dumps(config))
    return model, marker


def _eval(capsys: pytest.CaptureFixture[str], reference: Path, candidate: Path) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(["eval", "--reference", str(reference), "--candidate", f"c={candidate}", "--tasks", str(task_file()),
              "--no-cache"])
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


def test_custom_code_reference_is_refused_and_never_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, marker = _with_custom_code(tmp_path)
    code, out, err = _eval(capsys, model, tiny_reference())
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("qcheck: error: ")
    assert "config.json has auto_map" in err and "never runs a checkpoint's code" in err
    assert not marker.exists()


def test_custom_code_candidate_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, marker = _with_custom_code(tmp_path)
    code, _, err = _eval(capsys, tiny_reference(), model)
    assert code == 2 and "candidate c ships its own Python code" in err
    assert not marker.exists()


def test_transformers_called_as_qcheck_calls_it_neither_prompts_nor_runs_code(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers

    model, marker = _with_custom_code(tmp_path)
    monkeypatch.setattr("builtins.input", lambda *a: pytest.fail("transformers prompted"))
    for loader in (transformers.AutoConfig, transformers.AutoModelForCausalLM):
        with pytest.raises((ValueError, OSError)):
            loader.from_pretrained(str(model), **NO_CODE)
    assert not marker.exists()


def test_pickle_only_reference_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = _copy_reference(tmp_path, "pickle-only")
    (model / "model.safetensors").unlink()
    (model / "pytorch_model.bin").write_bytes(b"\x80\x02}q\x00.")
    code, out, err = _eval(capsys, model, tiny_reference())
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "pickle-only reference: transformers would torch.load pytorch_model.bin" in err


def test_decoy_reference_is_refused(tmp_path: Path) -> None:
    model = _copy_reference(tmp_path, "decoy")
    (model / "model.safetensors").rename(model / "weights.safetensors")
    (model / "pytorch_model.bin").write_bytes(b"\x80\x02}q\x00.")
    with pytest.raises(InputError, match=r"weights.safetensors beside it is not a name transformers loads"):
        check_reference(str(model))


def test_index_naming_a_pickle_shard_is_refused(tmp_path: Path) -> None:
    model = _copy_reference(tmp_path, "index")
    (model / "model.safetensors").rename(model / "model-00001-of-00001.safetensors")
    index = {"metadata": {}, "weight_map": {"lm_head.weight": "pytorch_model-00001-of-00001.bin",
                                            "model.norm.weight": "model-00001-of-00001.safetensors"}}
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(InputError, match=r"names non-safetensors shards \(pytorch_model-00001-of-00001.bin\)"):
        check_reference(str(model))


def test_a_plain_safetensors_reference_passes(tmp_path: Path) -> None:
    """A plain safetensors reference passes the check, and what qcheck then loads is exactly model.safetensors:
    every parameter equal to its tensor in the file, even with a booby-trapped pytorch_model.bin beside it (a
    pickle that writes a marker file if anything unpickles it)."""
    import torch
    from safetensors.torch import load_file

    from qcheck.eval.runners.reference import load_reference
    from support.pickles import builtin_exec

    model_dir = _copy_reference(tmp_path, "plain")
    marker = tmp_path / "UNPICKLED"
    (model_dir / "pytorch_model.bin").write_bytes(builtin_exec(f"open({str(marker)!r}, 'w').write('ran')"))
    check_reference(str(model_dir))
    model, tokenizer, device = load_reference(str(model_dir), dtype="float32")
    assert not marker.exists()
    stored = load_file(str(model_dir / "model.safetensors"))
    loaded = model.state_dict()
    assert set(stored) <= set(loaded) and len(stored) > 0
    for name, tensor in stored.items():
        assert torch.equal(loaded[name], tensor.to(torch.float32)), name
    # tied weights the file does not store are the ones transformers ties (the same storage, not other numbers)
    assert all(torch.equal(loaded[n], loaded["model.embed_tokens.weight"]) for n in set(loaded) - set(stored))
    assert (type(model).__name__, device, next(model.parameters()).dtype) == ("LlamaForCausalLM", "cpu",
                                                                            torch.float32)
    assert tokenizer.vocab_size == model.config.vocab_size
