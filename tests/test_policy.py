"""Policy loading: every unknown key or bad value names the file, the key and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from qcheck.errors import UsageError
from qcheck.policy import PolicyError, find_policy, load_policy, starter_policy
from support.gate_helpers import TEST_MATRIX, bf16_dir, q4_gguf, qcheck

GOOD_TARGET = '[[targets]]\nengine = "tinycpp"\ngpu = ["cpu"]\n'


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.setenv("QCHECK_MATRICES", str(TEST_MATRIX))
    q4_gguf(tmp_path / "models" / "q4.gguf")
    bf16_dir(tmp_path / "models" / "bf16")
    return tmp_path


def _load(project: Path, text: str):
    path = project / "qcheck.toml"
    path.write_text(text)
    return load_policy(path)


@pytest.mark.parametrize("text, key, problem, allowed", [
    ('models = ["models/q4.gguf"]\nmodel = 1\n' + GOOD_TARGET, "model", "unknown key; did you mean 'models'?",
     "models, targets, require-native, allow-unknown, require-kv-scales, kernels-only, lfs-pointers, memory, quality"),
    ('models = ["models/q4.gguf"]\nrequire_native = true\n' + GOOD_TARGET, "require_native",
     "unknown key; did you mean 'require-native'?", "models, targets"),
    ('models = ["models/q4.gguf"]\n[[targets]]\nengine = "tinycpp"\ngpus = ["cpu"]\n', "targets[0].gpus",
     "unknown key; did you mean 'gpu'?", "engine, gpu, models, require-native, allow-unknown, require-kv-scales"),
    ('models = ["models/q4.gguf"]\nrequire-native = "yes"\n' + GOOD_TARGET, "require-native",
     "must be true or false, not 'yes'", "true, false"),
    ('models = ["models/q4.gguf"]\nlfs-pointers = "ignore"\n' + GOOD_TARGET, "lfs-pointers",
     "'ignore' is not allowed", "error, skip"),
    ('models = ["models/q4.gguf"]\n' + GOOD_TARGET + '[memory]\ncontext = 0\n', "memory.context",
     "must be an integer from 1 to 16777216, not 0", None),
    ('models = ["models/q4.gguf"]\n' + GOOD_TARGET + '[memory]\nkv-cache-dtype = "fp3"\n', "memory.kv-cache-dtype",
     "unknown KV cache dtype 'fp3'", "bf16"),
    ('models = ["models/q4.gguf"]\n' + GOOD_TARGET + '[quality]\nreference = "ref"\nmax-kdl = 0.1\n',
     "quality.max-kdl", "unknown key; did you mean 'max-kld'?", "max-kld"),
    ('models = ["models/q4.gguf"]\n' + GOOD_TARGET + '[quality]\nreference = "ref"\nbackend = "vllm"\n',
     "quality.backend", "'vllm' is not allowed", "simulated"),
    ('models = ["models/q4.gguf"]\n' + GOOD_TARGET + '[quality]\nreference = "ref"\n', "quality",
     "sets no threshold", "tier"),
    ('models = ["models/q4.gguf"]\n' + GOOD_TARGET + '[quality]\nreference = "ref"\nstride = 512\n',
     "quality.stride", "must be an integer from 1 to 511, not 512", None),
    ('models = ["models/q4.gguf"]\n' + GOOD_TARGET + '[quality]\nreference = "ref"\nwindows = "overlap"\n',
     "quality.windows", "'overlap' is not allowed", "sliding, chunks"),
    ('models = ["models/q4.gguf"]\n' + GOOD_TARGET + '[quality]\nreference = "ref"\ntier = "good"\n'
     'simulate-engine = "tgi"\n', "quality.simulate-engine", "'tgi' is not allowed",
     "auto, llama.cpp, vllm, sglang, weights"),
    ('models = ["models/q4.gguf"]\n' + GOOD_TARGET + '[quality]\nreference = "ref"\ntier = "good"\n'
     'kv-cache-dtype = "q8_0,q4_0,f16"\n', "quality.kv-cache-dtype", "give one type, or K,V", None),
    ('models = ["models/*.ggml"]\n' + GOOD_TARGET, "models[0]", "the glob 'models/*.ggml' matches no file", None),
    ('models = ["models/q5.gguf"]\n' + GOOD_TARGET, "models[0]", "'models/q5.gguf': no such file or directory",
     "a path, a glob, or org/name[@revision][:file]"),
    ('models = ["models/q4.gguf", "models/*.gguf"]\n' + GOOD_TARGET, "models",
     "the same model is listed twice", None),
    ('models = []\n' + GOOD_TARGET, "models", "is empty", None),
    ('targets = []\n', "models", "missing", None),
    ('models = ["models/q4.gguf"]\n', "targets", "missing", None),
    ('models = ["models/q4.gguf", "models/bf16"]\n[[targets]]\nengine = "tinycpp"\ngpu = "cpu"\n'
     'models = ["*.gguf"]\n', "targets", "no target applies to models/bf16", None),
    ('models = ["models/q4.gguf"]\n[[targets]]\nengine = "tinycpp"\ngpu = "cpu"\nmodels = ["*.safetensors"]\n',
     "targets[0].models", "*.safetensors matches none of the policy's models", "models/q4.gguf"),
    ('models = ["models/q4.gguf"]\n[[targets]]\nengine = "tinycp"\ngpu = "cpu"\n', "targets[0]",
     "unknown engine", None),
    ('models = ["models/q4.gguf"]\n[[targets]]\nengine = "tinycpp"\ngpu = "h1000"\n', "targets[0]",
     "unknown GPU 'h1000'; did you mean", None),
    ('models = ["models/q4.gguf"]\n[[targets]]\nengine = "tinycpp==b5000==1"\ngpu = "cpu"\n', "targets[0]",
     "write name==version", None),
    ('models = [3]\n' + GOOD_TARGET, "models[0]", "must be a path, glob, Hub id or {path, name} table", None),
])
def test_bad_policies_name_file_key_and_allowed(project, monkeypatch, text, key, problem, allowed):
    monkeypatch.chdir(project)
    with pytest.raises(UsageError) as info:
        _load(project, text)
    message = str(info.value)
    assert message.startswith(f"{project / 'qcheck.toml'}: {key}: "), message
    assert problem in message
    if allowed:
        assert "allowed: " in message and allowed in message.split("allowed: ", 1)[1]


def test_quality_kv_cache_keys(project):
    policy = _load(project, 'models = ["models/q4.gguf"]\n' + GOOD_TARGET + '[quality]\nreference = "ref"\n'
                            'max-kld-kv-only = 0.01\nkv-cache-dtype = "Q8_0,q4_0"\ncache-type-v = "q5_1"\n'
                            'simulate-engine = "llama.cpp"\nkv-split = false\n')
    q = policy.quality
    assert (q.kv_cache.k, q.kv_cache.v, q.simulate_engine, q.kv_split) == ("q8_0", "q5_1", "llama.cpp", False)
    assert q.thresholds.max_kld_kv_only == 0.01
    assert policy.to_json()["quality"]["kv_cache"] == {"k": "q8_0", "v": "q5_1"}


def test_invalid_toml_names_the_line(project):
    with pytest.raises(PolicyError) as info:
        _load(project, 'models = ["models/q4.gguf"\n[[targets]]\n')
    assert "invalid TOML" in str(info.value) and "line 2" in str(info.value)


def test_paths_are_relative_to_the_policy_file_and_targets_inherit_defaults(project, monkeypatch, tmp_path_factory):
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    policy = _load(project, 'models = ["models/*.gguf", {path = "models/bf16", name = "bf16"}, "org/model@main"]\n'
                            'require-native = true\nallow-unknown = true\n'
                            '[[targets]]\nengine = ["tinycpp", "fastserve"]\ngpu = "a100"\n'
                            '[[targets]]\nengine = "tinycpp"\ngpu = "cpu"\nallow-unknown = false\n'
                            '[memory]\ncontext = 4096\nbatch = 2\nkv-cache-dtype = "FP8"\n')
    assert [m.name for m in policy.models] == ["models/q4.gguf", "bf16", "org/model@main"]
    assert policy.models[0].path == str(project / "models" / "q4.gguf") and not policy.models[0].hub
    assert policy.models[2].hub and policy.models[2].path == "org/model@main"
    t0, t1 = policy.targets
    assert (t0.engines, t0.gpus, t0.require_native, t0.allow_unknown) == (["tinycpp", "fastserve"], ["a100"], True, True)
    assert (t1.require_native, t1.allow_unknown) == (True, False)
    assert policy.memory is not None and (policy.memory.context, policy.memory.batch,
                                          policy.memory.kv_cache_dtype, policy.memory.enforce) == (4096, 2, "fp8", True)


def test_pyproject_tool_section(project, monkeypatch):
    monkeypatch.chdir(project)
    (project / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.qcheck]\nmodels = ["models/q4.gguf"]\n'
                                            '[[tool.qcheck.targets]]\nengine = "tinycpp"\ngpu = "cpu"\n'
                                            '[tool.qcheck.quality]\nreference = "ref"\ntier = "good"\nmax-kld = 0.05\n')
    assert find_policy(project) == project / "pyproject.toml"
    policy = load_policy()
    assert policy.file == "pyproject.toml [tool.qcheck]"
    assert policy.quality is not None
    assert policy.quality.thresholds.active() == {"max_kld": 0.05, "min_top1": 0.92}
    (project / "pyproject.toml").write_text('[tool.qcheck]\nmodels = ["models/q4.gguf"]\ntargetz = 1\n')
    with pytest.raises(PolicyError, match=r"^pyproject.toml \[tool.qcheck\]: targetz: unknown key"):
        load_policy()
    # qcheck.toml wins over pyproject.toml
    (project / "qcheck.toml").write_text('models = ["models/q4.gguf"]\n' + GOOD_TARGET)
    assert load_policy().file == "qcheck.toml"


def test_no_policy_is_a_usage_error_pointing_at_init(tmp_path):
    with pytest.raises(UsageError, match="qcheck gate --init"):
        load_policy(directory=tmp_path)


def test_cli_policy_error_is_one_line_exit_2(project):
    (project / "qcheck.toml").write_text('models = ["models/q4.gguf"]\n[[targets]]\nengin = "tinycpp"\n')
    proc = qcheck("gate", cwd=project)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == ("qcheck: error: qcheck.toml: targets[0].engin: unknown key; did you mean 'engine'? "
                           "(allowed: engine, gpu, models, require-native, allow-unknown, require-kv-scales, "
                           "kernels-only)\n")


def test_starter_policy_lists_found_models(project):
    (project / "models" / "big-00002-of-00003.gguf").write_bytes(b"GGUF")  # a later shard is not a model
    text = starter_policy(project)
    assert '  "models/bf16",\n  "models/q4.gguf",\n]' in text
    assert "00002-of-00003" not in text


def test_the_docs_example_uses_only_known_keys():
    import re

    from qcheck.eval.gate import Thresholds
    from qcheck.policy import MEMORY_KEYS, MODEL_KEYS, QUALITY_KEYS, TARGET_KEYS, TOP_KEYS, tomllib

    doc = (Path(__file__).resolve().parent.parent / "docs" / "ci.md").read_text()
    [example] = [b for b in re.findall(r"```toml\n(.*?)```", doc, re.S) if "[[targets]]" in b][:1]
    data = tomllib.loads(example)
    assert set(data) <= set(TOP_KEYS)
    assert all(set(m) <= set(MODEL_KEYS) for m in data["models"] if isinstance(m, dict))
    assert all(set(t) <= set(TARGET_KEYS) for t in data["targets"])
    from qcheck.knobs import KNOBS

    assert set(data["memory"]) <= set(MEMORY_KEYS) | {k.policy_key for k in KNOBS}
    thresholds = {n.replace("_", "-") for n in Thresholds.names()}
    assert set(data["quality"]) <= set(QUALITY_KEYS) | thresholds
    for name in thresholds:  # every threshold the policy accepts is documented
        assert name in doc, name
