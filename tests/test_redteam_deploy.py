"""Red-team round 3 (issue #32) on engine command lines and deployment manifests, through the real CLI
(``python -m qcheck`` in a subprocess; manifests in a temporary git repository):

1. secrets are masked by the option a token resolves to, in every format and message;
2. a command line over 4096 words is refused with the limit, never cut;
3. YAML merge keys are applied (as PyYAML, docker compose and Kubernetes apply them);
4. local paths a manifest names stay inside the repository (``--allow-outside`` opts in);
5. Modelfiles and manifests are read as bounded regular files (``/dev/zero``, a FIFO);
9. a scalar compose ``environment`` is one error line with file:line;
10. a manifest named by many deployments is parsed once, and the deployments are bounded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support.gate_helpers import qcheck

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
FORMATS = ("text", "json", "junit", "sarif", "github", "markdown")

#: every secret is a distinct word of at least 4 characters, none shaped like a provider key (``sk-``, ``hf_``), so
#: only the rule under test can mask it
SECRETS = {
    "api_key_equals": "S3cr3t-Api-Equals-1111", "api_key_abbrev": "S3cr3t-Api-Abbrev-2222",
    "openai_env": "S3cr3t-OpenAI-Env-3333", "private_env": "S3cr3t-Private-Env-4444",
    "db_password": "S3cr3t-DbPass-5555", "llama_equals": "S3cr3t-Llama-Equals-6666",
    "llama_hft": "S3cr3t-Llama-Hft-7777", "llama_env": "S3cr3t-Llama-Env-8888", "trt_equals": "S3cr3t-Trt-Eq-9999",
    "trt_spaced": "S3cr3t-Trt-Sp-0000", "url_user": "S3cr3tUrlUserAAAA", "llama_abbrev": "S3cr3t-Llama-Abbr-BBBB",
}
S = SECRETS

COMMANDS = {
    "vllm": [f"OPENAI_KEY={S['openai_env']}", f"PRIVATE_KEY={S['private_env']}",
             f"DATABASE_URL=postgres://app:{S['db_password']}@db.internal:5432/app",
             "vllm", "serve", str(EXAMPLES / "tiny-llama-bf16"), f"--api-key={S['api_key_equals']}",
             "--api-k", S["api_key_abbrev"], "--frobnicate"],
    "llama-server": [f"LLAMA_API_KEY={S['llama_env']}", "llama-server", "-m", str(EXAMPLES / "tiny-llama-Q4_0.gguf"),
                     f"--api-key={S['llama_equals']}", "-hft", S["llama_hft"], "--api-k", S["llama_abbrev"]],
    "trtllm-serve": ["trtllm-serve", str(EXAMPLES / "tiny-llama-bf16"), f"--hf_token={S['trt_equals']}",
                     "--hf_token", S["trt_spaced"], f"--backend=https://{S['url_user']}@mirror.example/x"],
}


def _no_secret(*texts: str) -> None:
    joined = "\n".join(texts)
    leaked = [name for name, value in SECRETS.items() if value in joined]
    assert not leaked, f"secrets printed: {leaked}"


def _repo(tmp_path: Path) -> Path:
    """A git repository with a GGUF and an FP8 model directory."""
    root = tmp_path / "repo"
    (root / "models").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    shutil.copy(EXAMPLES / "tiny-llama-Q4_0.gguf", root / "models" / "tiny.gguf")
    shutil.copytree(EXAMPLES / "tiny-llama-fp8-block", root / "models" / "fp8")
    (root / "deploy").mkdir()
    return root


def _policy(root: Path, text: str) -> None:
    (root / "qcheck.toml").write_text(text, encoding="utf-8")


def gate(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return qcheck("gate", *args, cwd=root, matrix=False)


# ------------------------------------------------------------------------------------------ 1. secrets
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("program", sorted(COMMANDS))
def test_secrets_on_an_engine_command_line_are_never_printed(program: str, fmt: str, tmp_path: Path) -> None:
    """``--api-key=X``, an abbreviation argparse resolves to ``--api-key``, a refused token quoted whole
    (llama.cpp takes no ``--flag=value``; trtllm-serve has no ``--hf_token``), ``-hft``, environment assignments
    whose name says KEY/TOKEN/PASSWORD and a URL's userinfo: masked in every format, the report files too."""
    junit, sarif, markdown = tmp_path / "r.xml", tmp_path / "r.sarif", tmp_path / "r.md"
    res = qcheck("check", "--gpu", "h100", "--format", fmt, "--junit", str(junit), "--sarif", str(sarif),
                 "--markdown", str(markdown), "--", *COMMANDS[program], matrix=False)
    assert res.returncode in (0, 1), res.stderr
    if fmt in ("text", "json"):  # the formats that show the command line
        assert "***" in res.stdout
    _no_secret(res.stdout, res.stderr, junit.read_text(), sarif.read_text(), markdown.read_text())


def test_masking_keeps_what_is_judged_and_what_the_engine_refuses() -> None:
    """Masking hides values, not the verdict: the refusals are still named, a numeric option whose name holds
    "tokens" is still shown and judged."""
    res = qcheck("check", "--gpu", "h100", "--json", "--", *COMMANDS["llama-server"], "-c", "2048", matrix=False)
    data = json.loads(res.stdout)
    deployment = data["deployment"]
    assert res.returncode == 1
    assert deployment["command"].startswith("LLAMA_API_KEY='***' llama-server -m ") or \
        deployment["command"].startswith("'LLAMA_API_KEY=***' llama-server -m "), deployment["command"]
    reasons = " ".join(data["verdicts"][0]["reasons"])
    assert "refuses --api-key=***: error: invalid argument: --api-key=***" in reasons
    assert ("-c", "2048", "context") in [(s["flag"], s["value"], s["judged_as"]) for s in deployment["judged"]]
    res = qcheck("check", "--gpu", "h100", "--json", "--", "vllm", "serve", str(EXAMPLES / "tiny-llama-bf16"),
                 "--max-num-batched-tokens", "8192", matrix=False)
    judged = json.loads(res.stdout)["deployment"]["judged"]
    assert ("--max-num-batched-tokens", "8192") in [(s["flag"], s["value"]) for s in judged], judged


def test_an_error_line_masks_a_url_userinfo() -> None:
    res = qcheck("check", str(EXAMPLES / "tiny-llama-bf16"), "--gpu", "h100", "--", "python", "-m",
                 f"https://u:{S['url_user']}@host.example/x", matrix=False)
    assert res.returncode == 2 and res.stderr.startswith("qcheck: error: python -m https://***@host.example/x: ")
    _no_secret(res.stdout, res.stderr)
    # not an environment assignment (a name cannot start with a digit): the program word, quoted masked
    res = qcheck("check", str(EXAMPLES / "tiny-llama-bf16"), "--gpu", "h100", "--",
                 f"1DB_PASSWORD={S['db_password']}", "vllm", "serve", matrix=False)
    assert res.returncode == 2 and res.stderr.startswith("qcheck: error: 1DB_PASSWORD=*** vllm: not an engine")
    _no_secret(res.stdout, res.stderr)


MANIFEST_SECRETS = f"""services:
  llama:
    image: ghcr.io/ggml-org/llama.cpp:server-cuda-b8895
    environment:
      - OPENAI_KEY={S['openai_env']}
      - DATABASE_URL=postgres://app:{S['db_password']}@db:5432/app
    command: ["-m", "/models/tiny.gguf", "--api-key={S['llama_equals']}", "-hft", "{S['llama_hft']}"]
    deploy: {{resources: {{reservations: {{devices: [{{driver: nvidia, count: 1, capabilities: [gpu]}}]}}}}}}
  vllm:
    image: vllm/vllm-openai:v0.33.0
    environment: {{PRIVATE_KEY: "{S['private_env']}"}}
    command: ["/models/fp8", "--api-k", "{S['api_key_abbrev']}", "--api-key={S['api_key_equals']}", "--frobnicate"]
    deploy: {{resources: {{reservations: {{devices: [{{driver: nvidia, count: 1, capabilities: [gpu]}}]}}}}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: trt}}
spec:
  template:
    spec:
      nodeSelector: {{nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}
      containers:
        - name: trt
          image: nvcr.io/nvidia/tensorrt-llm/release:1.2.1
          command: ["trtllm-serve", "/models/fp8", "--hf_token={S['trt_equals']}", "--hf_token", "{S['trt_spaced']}"]
          env: [{{name: LLAMA_API_KEY, value: "{S['llama_env']}"}}]
          resources: {{limits: {{nvidia.com/gpu: 1}}}}
"""


@pytest.mark.parametrize("fmt", FORMATS)
def test_secrets_in_manifests_are_never_printed(fmt: str, tmp_path: Path) -> None:
    root = _repo(tmp_path)
    (root / "deploy" / "all.yaml").write_text(MANIFEST_SECRETS, encoding="utf-8")
    _policy(root, 'deployments = [{ file = "deploy/all.yaml", gpu = "h100", models = { "/models/tiny.gguf" = '
                  '"models/tiny.gguf", "/models/fp8" = "models/fp8" } }]\n')
    junit, sarif, markdown = tmp_path / "r.xml", tmp_path / "r.sarif", tmp_path / "r.md"
    res = gate(root, "--format", fmt, "--junit", str(junit), "--sarif", str(sarif), "--markdown", str(markdown))
    assert res.returncode == 1, res.stderr  # --frobnicate and the refused tokens fail it
    assert "***" in res.stdout.replace("\\*", "*")  # Markdown escapes it
    _no_secret(res.stdout, res.stderr, junit.read_text(), sarif.read_text(), markdown.read_text())


# ------------------------------------------------------------------------------------------ 2. length
def _long_command(words: int) -> list[str]:
    """``vllm serve MODEL --port 8000 ... --frobnicate``: ``words`` arguments after ``serve``, the last refused."""
    pairs = (words - 2) // 2
    return ["vllm", "serve", str(EXAMPLES / "tiny-llama-bf16"), *(["--port", "8000"] * pairs), "--frobnicate"]


def test_a_command_line_over_the_limit_is_refused_not_cut() -> None:
    res = qcheck("check", "--gpu", "h100", "--", *_long_command(4102), matrix=False)
    assert res.returncode == 2, res.stdout[-500:]
    assert res.stderr.count("\n") == 1 and "qcheck reads at most 4096" in res.stderr
    assert "4102 words" in res.stderr and not res.stdout


def test_a_command_line_at_the_limit_is_judged_whole() -> None:
    words = _long_command(4096)
    assert len(words) - 2 == 4096
    res = qcheck("check", "--gpu", "h100", "--json", "--", *words, matrix=False)
    assert res.returncode == 1, res.stderr
    assert "unrecognized arguments: --frobnicate" in " ".join(json.loads(res.stdout)["verdicts"][0]["reasons"])


def test_a_manifest_command_over_the_limit_is_not_judged(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    args = json.dumps(["/models/fp8", *(["--port", "8000"] * 2050), "--frobnicate"])
    (root / "deploy" / "long.yaml").write_text(
        "services:\n  vllm:\n    image: vllm/vllm-openai:v0.33.0\n    command: " + args + "\n"
        "    deploy: {resources: {reservations: {devices: [{driver: nvidia, count: 1, capabilities: [gpu]}]}}}\n",
        encoding="utf-8")
    _policy(root, 'deployments = [{ file = "deploy/long.yaml", gpu = "h100", models = { "/models/fp8" = '
                  '"models/fp8" } }]\nallow-unknown = true\n')
    res = gate(root, "--json")
    assert res.returncode == 2, res.stdout[-2000:]
    [model] = json.loads(res.stdout)["models"]
    assert model["status"] == "error" and "qcheck reads at most 4096" in model["error"], model


# ------------------------------------------------------------------------------------------ 3. merge keys
MERGED_COMPOSE = """x-vllm: &vllm
  image: vllm/vllm-openai:v0.34.0
  command: ["/models/fp8", "--kv-cache-dtype", "q4_0", "--frobnicate"]
  deploy: {resources: {reservations: {devices: [{driver: nvidia, count: 1, capabilities: [gpu]}]}}}
services:
  merged:
    <<: *vllm
  overridden:
    <<: *vllm
    command: ["/models/fp8", "--max-model-len", "1024"]
"""

MERGED_K8S = """apiVersion: v1
kind: List
items:
  - apiVersion: apps/v1
    kind: Deployment
    metadata: {name: first}
    spec:
      template:
        spec:
          nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
          containers:
            - &base
              name: vllm
              image: vllm/vllm-openai:v0.34.0
              args: ["/models/fp8", "--max-model-len", "1024"]
              resources: {limits: {nvidia.com/gpu: 1}}
  - apiVersion: apps/v1
    kind: Deployment
    metadata: {name: second}
    spec:
      template:
        spec:
          nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
          containers:
            - <<: [{args: ["/models/fp8", "--frobnicate"]}, *base]
              name: merged
"""


def test_yaml_merge_keys_are_applied(tmp_path: Path) -> None:
    """Compose ``<<: *anchor`` (the anchor's command with a refused KV type and flag) and a Kubernetes container
    merging a list of mappings (the first wins): judged as docker compose and kubectl read them."""
    root = _repo(tmp_path)
    (root / "deploy" / "compose.yaml").write_text(MERGED_COMPOSE, encoding="utf-8")
    (root / "deploy" / "k8s.yaml").write_text(MERGED_K8S, encoding="utf-8")
    _policy(root, 'deployments = [{ file = "deploy/compose.yaml", gpu = "h100", models = { "/models/fp8" = '
                  '"models/fp8" } }, { file = "deploy/k8s.yaml", models = { "/models/fp8" = "models/fp8" } }]\n')
    res = gate(root, "--json")
    data = json.loads(res.stdout)
    assert res.returncode == 1, res.stderr
    by_name = {m["name"].split(" ", 1)[1]: m["verdicts"][0] for m in data["models"]}
    merged = by_name["service/merged"]
    assert merged["status"] == "unsupported" and "--kv-cache-dtype q4_0" in " ".join(merged["reasons"])
    assert merged["deployment"]["command"].endswith("/models/fp8 --kv-cache-dtype q4_0 --frobnicate")
    assert by_name["service/overridden"]["status"] == "native"  # its own command wins over the merged one
    assert by_name["Deployment/first/vllm"]["status"] == "native"
    second = by_name["Deployment/second/merged"]
    assert second["status"] == "unsupported" and "--frobnicate" in " ".join(second["reasons"])
    assert second["deployment"]["command"].endswith("/models/fp8 --frobnicate")


MERGE_DOCS = [
    "base: &b {a: x, b: y}\nuse: {<<: *b, b: z, c: w}\n",  # own keys win
    "use:\n  b: z\n  <<: *b\nbase: &b {a: x, b: y}\n",  # an alias before its anchor: an error in both
    "x: &x {a: '1', b: '2'}\ny: &y {b: '3', c: '4'}\nz: {<<: [*x, *y], d: '5'}\n",  # the first merged wins
    "x: &x {a: p}\ny: &y {<<: *x, b: q}\nz: {<<: *y, c: r}\n",  # a merge of a merge
    "l: &l [{a: p}]\ns:\n  - &m {k: v, n: ~}\n  - {<<: *m, k: w}\n",  # in sequence items; a null kept
    "m: &m {a: p}\n---\nn: {a: q}\n",  # documents
    "a: {<<: {x: p}, <<: {y: q}}\n",  # two merge keys in one mapping
    "a: ['<<', {'<<': p}]\n",  # not a merge: quoted, a string and a key
    "a: {<<: p}\n",  # a merge of a scalar: an error in both
]


@pytest.mark.parametrize("text", MERGE_DOCS)
def test_merge_keys_read_as_pyyaml_reads_them(text: str) -> None:
    """The bounded builder against PyYAML's own constructor (``yaml.safe_load_all``, which applies merge keys as
    YAML 1.1 says) on documents of strings: the same values, or an error in both."""
    import yaml

    from qcheck.deploy.manifests import ManifestError, _load

    try:
        expected = list(yaml.safe_load_all(text))
    except yaml.YAMLError:
        with pytest.raises(ManifestError):
            _load(text, "m.yaml")
        return
    assert _load(text, "m.yaml") == expected


def test_a_merge_bomb_is_refused_by_the_node_budget(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    levels = "a: &a {x0: v, x1: v, x2: v, x3: v, x4: v, x5: v, x6: v, x7: v, x8: v, x9: v}\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdef", "bcdefg", strict=True))
    (root / "deploy" / "bomb.yaml").write_text(levels + "services:\n  s:\n    <<: [*g]\n", encoding="utf-8")
    _policy(root, 'deployments = ["deploy/bomb.yaml"]\n')
    res = gate(root, "--json")
    assert res.returncode == 2, res.stderr
    assert "aliases counted each time they are used" in json.loads(res.stdout)["models"][0]["error"]


# ------------------------------------------------------------------------------------------ 4. paths
def _outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir()
    shutil.copy(EXAMPLES / "tiny-llama-Q8_0.gguf", out / "secret-model.gguf")
    return out / "secret-model.gguf"


def _ollama_create_compose(modelfile: str) -> str:
    """A compose service running ``ollama create x -f MODELFILE`` on one GPU."""
    return ("services:\n  ollama:\n    image: ollama/ollama:0.33.0\n"
            f"    command: [\"create\", \"x\", \"-f\", {json.dumps(modelfile)}]\n"
            "    deploy: {resources: {reservations: {devices: [{driver: nvidia, count: 1, capabilities: [gpu]}]}}}\n")


def _llama_compose(model: str) -> str:
    return (f"services:\n  llama:\n    image: ghcr.io/ggml-org/llama.cpp:server-cuda-b8895\n"
            f"    command: [\"-m\", {json.dumps(model)}]\n"
            "    deploy: {resources: {reservations: {devices: [{driver: nvidia, count: 1, capabilities: [gpu]}]}}}\n")


@pytest.mark.parametrize("where", ["absolute", "dotdot", "symlink", "etc-passwd", "missing", "dir-with-symlink"])
def test_a_manifest_model_outside_the_repository_is_refused(where: str, tmp_path: Path) -> None:
    root = _repo(tmp_path)
    outside = _outside(tmp_path)
    (root / "models" / "link.gguf").symlink_to(outside)
    (root / "models" / "dir").mkdir()
    (root / "models" / "dir" / "model.gguf").symlink_to(outside)
    model = {"absolute": str(outside), "dotdot": "../outside/secret-model.gguf", "symlink": "models/link.gguf",
             "etc-passwd": "/etc/passwd", "missing": "/root/.ssh/id_rsa", "dir-with-symlink": "models/dir"}[where]
    (root / "deploy" / "compose.yaml").write_text(_llama_compose(model), encoding="utf-8")
    _policy(root, 'deployments = [{ file = "deploy/compose.yaml", gpu = "h100" }]\n')
    res = gate(root, "--json")
    assert res.returncode == 2, res.stdout[-1500:]
    [entry] = json.loads(res.stdout)["models"]
    problem = "symlink out of the policy's repository" if where == "dir-with-symlink" else \
        "outside the policy's repository"
    assert entry["status"] == "error" and problem in entry["error"], entry["error"]
    assert "looks like text" not in res.stdout and "no such file" not in res.stdout
    assert "Q8_0" not in res.stdout  # nothing read from the checkpoint outside
    assert "--allow-outside" in entry["error"]


def test_allow_outside_lets_the_manifest_model_out(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    outside = _outside(tmp_path)
    (root / "deploy" / "compose.yaml").write_text(_llama_compose(str(outside)), encoding="utf-8")
    _policy(root, 'deployments = [{ file = "deploy/compose.yaml", gpu = "h100" }]\n')
    res = gate(root, "--json", "--allow-outside")
    [entry] = json.loads(res.stdout)["models"]
    assert entry["status"] == "judged", entry
    assert entry["inspection"]["quantization"]["gguf_file_type"] == "Q8_0"


@pytest.mark.parametrize("case", ["from-absolute", "from-dotdot", "modelfile-outside"])
def test_modelfile_paths_outside_the_repository_are_refused(case: str, tmp_path: Path) -> None:
    root = _repo(tmp_path)
    outside = _outside(tmp_path)
    (outside.parent / "Modelfile").write_text(f"FROM {outside}\n", encoding="utf-8")
    if case == "modelfile-outside":
        (root / "deploy" / "compose.yaml").write_text(_ollama_create_compose(str(outside.parent / "Modelfile")),
                                                      encoding="utf-8")
        _policy(root, 'deployments = [{ file = "deploy/compose.yaml", gpu = "h100" }]\n')
    else:
        source = str(outside) if case == "from-absolute" else "../../outside/secret-model.gguf"
        (root / "deploy" / "Modelfile").write_text(f"FROM {source}\nPARAMETER num_ctx 2048\n", encoding="utf-8")
        _policy(root, 'deployments = [{ file = "deploy/Modelfile", gpu = "h100" }]\n')
    res = gate(root, "--json")
    assert res.returncode == 2, res.stdout[-1500:]
    [entry] = json.loads(res.stdout)["models"]
    assert entry["status"] == "error" and "outside the policy's repository" in entry["error"], entry
    assert "Q8_0" not in res.stdout


# ------------------------------------------------------------------------------------------ 5. bounded reads
def test_a_modelfile_that_is_a_device_or_a_fifo_is_refused_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "Modelfile.fifo"
    os.mkfifo(fifo)
    big = tmp_path / "Modelfile.big"
    big.write_text("# padding\n" * 110_000, encoding="utf-8")
    for path, problem in ((Path("/dev/zero"), "not a regular file"), (fifo, "not a regular file"),
                          (big, "too large for a Modelfile")):
        res = qcheck("check", str(EXAMPLES / "tiny-llama-Q4_0.gguf"), "--gpu", "h100", "--", "ollama", "create", "x",
                     "-f", str(path), matrix=False)
        assert res.returncode == 2 and problem in res.stderr, (path, res.stderr)
        assert res.stderr.count("\n") == 1 and not res.stdout


def test_a_manifest_modelfile_that_is_a_fifo_or_a_device_is_refused(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    os.mkfifo(root / "deploy" / "Modelfile.fifo")
    for target, extra in (("deploy/Modelfile.fifo", ()), ("/dev/zero", ("--allow-outside",))):
        (root / "deploy" / "compose.yaml").write_text(_ollama_create_compose(target), encoding="utf-8")
        _policy(root, 'deployments = [{ file = "deploy/compose.yaml", gpu = "h100", model = "models/tiny.gguf" }]\n')
        res = gate(root, "--json", *extra)
        assert res.returncode == 2, (target, res.stderr)
        [entry] = json.loads(res.stdout)["models"]
        assert "not a regular file" in entry["error"], entry


# ------------------------------------------------------------------------------------------ 9. environment
@pytest.mark.parametrize("value", ["FOO", "42", "true"])
def test_a_scalar_compose_environment_is_one_error_line(value: str, tmp_path: Path) -> None:
    root = _repo(tmp_path)
    (root / "deploy" / "compose.yaml").write_text(
        "services:\n  llama:\n    image: ghcr.io/ggml-org/llama.cpp:server-cuda-b8895\n"
        f"    environment: {value}\n    command: [\"-m\", \"/models/tiny.gguf\"]\n", encoding="utf-8")
    _policy(root, 'deployments = [{ file = "deploy/compose.yaml", gpu = "h100" }]\n')
    res = gate(root)
    assert res.returncode == 2 and "internal error" not in res.stderr + res.stdout, res.stderr
    assert "deploy/compose.yaml:4: services.llama.environment must be a mapping" in res.stdout


# ------------------------------------------------------------------------------------------ 10. cost
def test_deployments_are_bounded(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    (root / "deploy" / "compose.yaml").write_text(_llama_compose("/models/tiny.gguf"), encoding="utf-8")
    _policy(root, "deployments = [" + ", ".join(['"deploy/compose.yaml"'] * 1001) + "]\n")
    res = gate(root)
    assert res.returncode == 2 and "deployments: 1001 entries; at most 1000" in res.stderr, res.stderr


def test_a_manifest_named_by_many_deployments_is_parsed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI in this process, counting the YAML parser's runs: three entries naming one file (two spellings)
    parse it once, and a refused file once too."""
    import yaml

    from qcheck.cli import main
    from qcheck.deploy import manifests

    root = _repo(tmp_path)
    (root / "deploy" / "compose.yaml").write_text(_llama_compose("/models/tiny.gguf"), encoding="utf-8")
    (root / "deploy" / "bad.yaml").write_text("services: [unclosed\n", encoding="utf-8")
    _policy(root, 'deployments = [{ file = "deploy/compose.yaml", gpu = "h100", models = { "/models/tiny.gguf" = '
                  '"models/tiny.gguf" } }, { file = "./deploy/compose.yaml", gpu = "l4", models = { '
                  '"/models/tiny.gguf" = "models/tiny.gguf" } }, { file = "deploy/compose.yaml", gpu = "a100", '
                  'models = { "/models/tiny.gguf" = "models/tiny.gguf" } }, "deploy/bad.yaml", "deploy/bad.yaml"]\n')
    calls: list[int] = []
    original = yaml.parse
    monkeypatch.setattr(yaml, "parse", lambda *a, **k: calls.append(1) or original(*a, **k))
    monkeypatch.setattr(manifests, "_PARSED", {})
    monkeypatch.chdir(root)
    monkeypatch.delenv("QCHECK_MATRICES", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        main(["gate", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert exit_info.value.code == 2
    assert len(calls) == 2, calls
    assert sorted(v["gpu"] for m in data["models"] for v in m["verdicts"]) == ["a100", "h100", "l4"]
    errors = [m["error"] for m in data["models"] if m["status"] == "error"]
    assert len(errors) == 2 and all(e.startswith("deploy/bad.yaml:2: not valid YAML") for e in errors), errors
