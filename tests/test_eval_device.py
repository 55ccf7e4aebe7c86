"""``--device auto``: the reference placed by accelerate's ``device_map="auto"`` within ``--max-memory``, here on the
CPU-offload paths a machine without a GPU has (part of the model in memory, the rest offloaded to disk and streamed
in layer by layer); the numbers must equal the plain CPU run's. ``--device cuda`` without CUDA is one line, exit 2."""

from __future__ import annotations

import pytest

from support.eval_helpers import task_file, tiny_gguf, tiny_reference

torch = pytest.importorskip("torch")
pytest.importorskip("accelerate")


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("QCHECK_CACHE_DIR", str(tmp_path / "cache"))


def test_disk_offloaded_reference_equals_the_cpu_run(tmp_path):
    """3 MB of CPU memory holds the embeddings and part of the first layer of the tiny reference: the rest goes to
    disk. Every metric of a candidate (and the reference's own perplexity) equals the CPU run's."""
    from qcheck.eval.run import EvalConfig, run_eval

    common = dict(reference=str(tiny_reference()), candidates=[f"q8={tiny_gguf('Q8_0')}"], tasks=[str(task_file())],
                  cache_dir=str(tmp_path / "cache"), bootstrap=100)
    cpu = run_eval(EvalConfig(**common))
    auto = run_eval(EvalConfig(**common, device="auto", max_memory={"cpu": "3MB"}))
    placed = auto.reference["placement"]
    assert placed.get("disk", 0) > 0 and placed.get("cpu", 0) > 0, placed
    assert "placement" not in cpu.reference and auto.reference["device"] == "auto"
    assert not auto.cache.hit  # its own cache entry, computed offloaded
    a, c = auto.candidates[0].metrics, cpu.candidates[0].metrics
    assert a["tokens_scored"] == c["tokens_scored"] > 100
    for key in ("kld_mean", "kld_max", "ln_ppl_ratio", "ppl_reference", "delta_p_rms"):
        assert a[key] == pytest.approx(c[key], rel=1e-5, abs=1e-7), key
    for key in ("top1_agreement", "accuracy_reference", "accuracy", "greedy_agreement"):
        assert a[key] == c[key], key


def test_cuda_without_a_gpu_is_one_line_exit_2(tmp_path, capsys):
    from qcheck.cli import main

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    cases = [(["--device", "cuda"], "--device cuda: no CUDA device is available"),
             (["--max-memory", "cpu=1GiB"], "use --device auto"),
             (["--device", "auto", "--max-memory", "cpu=lots"], "use DEVICE=SIZE")]
    for extra, message in cases:
        with pytest.raises(SystemExit) as exc:
            main(["eval", "-r", str(tiny_reference()), "-c", str(tiny_gguf("Q8_0")), "-t", "prose", "--max-items",
                  "1", *extra])
        out = capsys.readouterr()
        lines = out.err.strip().splitlines()
        assert exc.value.code == 2 and len(lines) == 1 and lines[0].startswith("qcheck: error:"), out.err
        assert message in lines[0] and out.out == ""


def test_parse_max_memory():
    from qcheck.errors import UsageError
    from qcheck.eval.runners.reference import parse_max_memory

    assert parse_max_memory(["0=20GiB", "cpu=64 GiB", "1=512MB"]) == {0: "20GiB", "cpu": "64GiB", 1: "512MB"}
    for bad in ("gpu0=1GiB", "0=", "cpu=1 parsec", "0:1GiB"):
        with pytest.raises(UsageError):
            parse_max_memory([bad])
