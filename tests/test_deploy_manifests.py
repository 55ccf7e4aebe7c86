"""``qcheck gate`` over deployment manifests: a repository holding a compose file (llama.cpp server, GGUF) and a
Kubernetes Deployment (vLLM, FP8 safetensors) for two models; the engine version comes from the image tag, the GPU
from the node selector; a manifest without a GPU and an unknown image are unknown with the reason; an alias bomb
is refused cleanly."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from support.contract import validate

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

COMPOSE = """services:
  llama:
    image: ghcr.io/ggml-org/llama.cpp:server-cuda-b8895
    command: ["-m", "/models/tiny.gguf", "-c", "2048", "-ctk", "q8_0", "-ctv", "q8_0", "--port", "8080"]
    volumes: ["./models:/models"]
    deploy:
      resources:
        reservations:
          devices:
            - driver: nvidia
              count: 1
              capabilities: [gpu]
  ui:
    image: ghcr.io/open-webui/open-webui:main
"""

K8S = """apiVersion: apps/v1
kind: Deployment
metadata: {name: vllm-fp8}
spec:
  template:
    spec:
      nodeSelector:
        nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.33.0
          args: ["/models/fp8", "--max-model-len", "1024", "--kv-cache-dtype", "fp8", "--api-key", "sk-k8s-secret-123"]
          resources:
            limits:
              nvidia.com/gpu: 1
---
apiVersion: v1
kind: Pod
metadata: {name: no-gpu}
spec:
  containers:
    - name: vllm
      image: vllm/vllm-openai:v0.33.0
      args: ["/models/fp8"]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: vllm-tp2}
spec:
  template:
    spec:
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
              - matchExpressions:
                  - {key: node.kubernetes.io/instance-type, operator: In, values: [p5.48xlarge]}
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.33.0
          command: ["vllm", "serve", "/models/fp8", "-tp", "2"]
          resources: {limits: {nvidia.com/gpu: "1"}}
"""


def repo(tmp_path: Path) -> Path:
    (tmp_path / ".git").mkdir()
    (tmp_path / "models").mkdir()
    shutil.copy(EXAMPLES / "tiny-llama-Q4_0.gguf", tmp_path / "models" / "tiny.gguf")
    shutil.copytree(EXAMPLES / "tiny-llama-fp8-block", tmp_path / "models" / "fp8")
    (tmp_path / "deploy").mkdir()
    (tmp_path / "deploy" / "compose.yaml").write_text(COMPOSE, encoding="utf-8")
    (tmp_path / "deploy" / "vllm.yaml").write_text(K8S, encoding="utf-8")
    (tmp_path / "qcheck.toml").write_text("""
deployments = [
  { file = "deploy/compose.yaml", models = { "/models/tiny.gguf" = "models/tiny.gguf" }, gpu = "NVIDIA-GeForce-RTX-4090" },
  { file = "deploy/vllm.yaml", models = { "/models/fp8" = "models/fp8" } },
]
""", encoding="utf-8")
    return tmp_path


def gate(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QCHECK_")}
    return subprocess.run([sys.executable, "-m", "qcheck", "gate", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=180)


def test_compose_and_kubernetes_deployments(tmp_path: Path) -> None:
    res = gate(repo(tmp_path), "--json")
    data = json.loads(res.stdout)
    assert res.returncode == 1, res.stderr  # the unknown image and the GPU-less pod fail the gate
    validate(data, "gate")
    by_name = {m["name"]: m for m in data["models"]}
    llama = by_name["deploy/compose.yaml:3 service/llama"]["verdicts"][0]
    assert (llama["engine"], llama["engine_version"], llama["gpu"], llama["status"]) == \
        ("llama.cpp", "b8895", "rtx-4090", "native")
    assert llama["deployment"]["image"] == "ghcr.io/ggml-org/llama.cpp:server-cuda-b8895"
    assert [s["flag"] for s in llama["deployment"]["not_judged"]] == ["--port"]
    vllm = by_name["deploy/vllm.yaml:10 Deployment/vllm-fp8/vllm"]["verdicts"][0]
    assert (vllm["engine"], vllm["engine_version"], vllm["gpu"], vllm["status"]) == ("vllm", "0.33.0", "h100", "native")
    assert ("--max-model-len", "context") in [(s["flag"], s["judged_as"]) for s in vllm["deployment"]["judged"]]
    ui = by_name["deploy/compose.yaml:14 service/ui"]["verdicts"][0]
    assert ui["status"] == "unknown" and "not an inference engine image qcheck knows" in ui["reasons"][0]
    pod = by_name["deploy/vllm.yaml:22 Pod/no-gpu/vllm"]["verdicts"][0]
    assert pod["status"] == "unknown" and "no GPU" in pod["reasons"][0]
    tp2 = by_name["deploy/vllm.yaml:39 StatefulSet/vllm-tp2/vllm"]["verdicts"][0]
    assert tp2["gpu"] == "h100" and tp2["status"] == "unsupported"
    assert "World size (2) is larger than the number of available GPUs (1)" in " ".join(tp2["reasons"])
    assert "sk-k8s-secret" not in res.stdout
    text = gate(tmp_path).stdout
    assert "deploy/vllm.yaml:22" in text


def test_alias_bomb_is_refused(tmp_path: Path) -> None:
    root = repo(tmp_path)
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=False))
    (root / "deploy" / "vllm.yaml").write_text(bomb, encoding="utf-8")
    res = gate(root, "--json")
    assert res.returncode == 2, res.stderr
    errors = [m["error"] for m in json.loads(res.stdout)["models"] if m["status"] == "error"]
    assert any("aliases counted" in e for e in errors)


def test_modelfile_deployment(tmp_path: Path) -> None:
    root = repo(tmp_path)
    (root / "deploy" / "Modelfile").write_text("FROM ../models/tiny.gguf\nPARAMETER num_ctx 2048\nPARAMETER top_k 20\n",
                                              encoding="utf-8")
    (root / "qcheck.toml").write_text('deployments = [{ file = "deploy/Modelfile", gpu = "rtx-4090" }]\n',
                                      encoding="utf-8")
    res = gate(root, "--json")
    data = json.loads(res.stdout)
    validate(data, "gate")
    verdict = data["models"][0]["verdicts"][0]
    assert (verdict["engine"], verdict["gpu"]) == ("ollama", "rtx-4090"), res.stderr
    assert ("PARAMETER num_ctx", "context") in [(s["flag"], s["judged_as"]) for s in verdict["deployment"]["judged"]]
    assert [s["flag"] for s in verdict["deployment"]["not_judged"]] == ["PARAMETER top_k"]


def test_hostile_and_wrong_manifests(tmp_path: Path) -> None:
    root = repo(tmp_path)
    cases = {
        "deep.yaml": "a: " + "[" * 200 + "]" * 200 + "\n",
        "bad.yaml": "services: {llama: [unclosed\n",
        "latin1.yaml": "services:\n  x:\n    image: caf\xe9\n",
        "python.yaml": "kind: Pod\nspec: !!python/object/apply:os.system [\"touch pwned\"]\n",
        "empty.yaml": "just: text\n",
    }
    for name, text in cases.items():
        (root / "deploy" / name).write_bytes(text.encode("latin-1"))
        (root / "qcheck.toml").write_text(f'deployments = ["deploy/{name}"]\n', encoding="utf-8")
        res = gate(root, "--json")
        assert res.returncode == 2, (name, res.stderr)
        assert "Traceback" not in res.stderr
        error = json.loads(res.stdout)["models"][0]["error"]
        assert error.startswith(f"deploy/{name}"), error
    assert not (root / "pwned").exists()
    (root / "qcheck.toml").write_text('deployments = ["../outside.yaml"]\n', encoding="utf-8")
    (tmp_path.parent / "outside.yaml").write_text("kind: Pod\n", encoding="utf-8")
    res = gate(root)
    assert res.returncode == 2 and "outside the policy's repository" in res.stderr
    (root / "qcheck.toml").write_text('deployments = [{ file = "deploy/compose.yaml", gpus = "h100" }]\n',
                                      encoding="utf-8")
    res = gate(root)
    assert res.returncode == 2 and "deployments[0].gpus: unknown key" in res.stderr


def test_ollama_server_shell_scripts_and_odd_commands(tmp_path: Path) -> None:
    root = repo(tmp_path)
    (root / "deploy" / "more.yaml").write_text("""services:
  ollama:
    image: ollama/ollama:0.33.0
    environment:
      OLLAMA_CONTEXT_LENGTH: "2048"
      OLLAMA_DEBUG:
    deploy: {resources: {reservations: {devices: [{driver: nvidia, count: all, capabilities: [gpu]}]}}}
  scripted:
    image: vllm/vllm-openai:v0.33.0
    entrypoint: ["/bin/sh", "-c", "pip install extra && vllm serve /models/fp8"]
    deploy: {resources: {reservations: {devices: [{capabilities: [gpu], count: 1}]}}}
  quotes:
    image: vllm/vllm-openai:v0.33.0
    command: "/models/fp8 --served-model-name 'unbalanced"
    deploy: {resources: {reservations: {devices: [{capabilities: [gpu], count: 1}]}}}
""", encoding="utf-8")
    (root / "qcheck.toml").write_text(
        '[[deployments]]\nfile = "deploy/more.yaml"\nmodel = "models/tiny.gguf"\ngpu = "l4"\n', encoding="utf-8")
    res = gate(root, "--json")
    data = json.loads(res.stdout)
    validate(data, "gate")
    by_name = {m["name"].split(" ", 1)[1]: m["verdicts"][0] for m in data["models"]}
    ollama = by_name["service/ollama"]
    assert (ollama["engine"], ollama["engine_version"], ollama["gpu"]) == ("ollama", "0.33.0", "l4"), res.stderr
    assert ("OLLAMA_CONTEXT_LENGTH", "context") in [(s["flag"], s["judged_as"]) for s in ollama["deployment"]["judged"]]
    assert by_name["service/scripted"]["status"] == "unknown"
    assert "not an engine command qcheck reads" in by_name["service/scripted"]["reasons"][0]
    assert by_name["service/quotes"]["status"] == "unknown"
    assert "cannot be split" in by_name["service/quotes"]["reasons"][0]
    assert res.returncode == 1
