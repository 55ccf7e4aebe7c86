"""Every Hub failure is one clear line and exit code 2; retries where they help; the token never shows."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from qcheck.errors import QcheckError, RemoteError
from qcheck.hub import GatedRepoError, NetworkError, NotFoundError, RateLimitedError, resolve_target
from qcheck.readers import load_checkpoint
from support.hubserver import TOKEN, gguf_bytes, sharded_repo


def _run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "qcheck", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def _env(hub, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
    env.update({"HF_ENDPOINT": hub.endpoint, "QCHECK_HUB_BACKOFF": "0.01", "QCHECK_HUB_TIMEOUT": "10",
                "QCHECK_HUB_RETRIES": "2"})
    env.update(extra)
    return env


def test_gated_repo_without_token_says_where_to_accept_the_licence(hub):
    hub.add_repo("meta/gated", sharded_repo(1), gated=True, granted={TOKEN})
    with pytest.raises(GatedRepoError) as exc:
        load_checkpoint("meta/gated")
    msg = str(exc.value)
    assert f"accept the licence at {hub.endpoint}/meta/gated and set HF_TOKEN" in msg
    assert "HTTP 401" in msg and exc.value.exit_code == 2


def test_gated_repo_with_an_ungranted_token_is_403_and_the_token_stays_secret(hub, monkeypatch):
    other = "hf_NotGrantedTokenXYZ0123456789"
    monkeypatch.setenv("HF_TOKEN", other)
    hub.echo_auth = True  # the server puts the Authorization header in its error message
    hub.add_repo("meta/gated", sharded_repo(1), gated=True, granted={TOKEN})
    with pytest.raises(GatedRepoError) as exc:
        load_checkpoint("meta/gated")
    msg = str(exc.value)
    assert "HTTP 403" in msg and "not granted access" in msg
    assert other not in msg


def test_gated_repo_with_the_granted_token_loads(hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hub.add_repo("meta/gated", sharded_repo(1), gated=True, granted={TOKEN})
    assert len(load_checkpoint("meta/gated").tensors) == 18
    assert all(r.auth for r in hub.requests(r"^/meta/gated/resolve/"))


def test_private_and_missing_repos_revisions_and_files(hub):
    hub.add_repo("org/private", sharded_repo(1), private=True, granted={TOKEN})
    hub.add_repo("org/public", sharded_repo(1))
    with pytest.raises(NotFoundError, match=r"repository org/private not found on .* \(HTTP 401\); if it is private "
                                            r"or gated, set HF_TOKEN"):
        load_checkpoint("org/private")
    with pytest.raises(NotFoundError, match=r"repository org/nope not found"):
        load_checkpoint("org/nope")
    with pytest.raises(NotFoundError, match=r"revision 'v9' not found in org/public \(HTTP 404\)"):
        load_checkpoint("org/public@v9")
    with pytest.raises(NotFoundError, match=r"file 'missing.gguf' not found in org/public"):
        load_checkpoint("org/public:missing.gguf")


def test_file_vanishing_after_listing_is_a_clear_404(hub):
    hub.add_repo("org/flaky", sharded_repo(2))
    hub.inject(r"model-00002-of-00002\.safetensors$", 404, times=10,
               headers={"X-Error-Code": "EntryNotFound"})
    with pytest.raises(NotFoundError, match=r"file 'model-00002-of-00002.safetensors' not found in org/flaky@[0-9a-f]"):
        load_checkpoint("org/flaky")


def test_429_is_retried_honouring_retry_after_then_succeeds(hub):
    hub.add_repo("org/busy", sharded_repo(1))
    hub.inject(r"^/api/models/org/busy", 429, times=2, headers={"Retry-After": "0"})
    assert len(load_checkpoint("org/busy").tensors) == 18
    assert [r.status for r in hub.requests(r"^/api/models/org/busy")] == [429, 429, 200]


def test_429_that_persists_fails_after_the_retries(hub):
    hub.add_repo("org/busy", sharded_repo(1))
    hub.inject(r"^/api/models/org/busy", 429, times=100, headers={"Retry-After": "0"})
    with pytest.raises(RateLimitedError, match=r"rate limited .* \(HTTP 429\) on repo info in org/busy after 3 "
                                               r"attempts.*HF_TOKEN"):
        load_checkpoint("org/busy")
    assert len(hub.requests(r"^/api/models/org/busy")) == 3


def test_429_with_the_hubs_ratelimit_header(hub):
    hub.add_repo("org/busy", sharded_repo(1))
    hub.inject(r"^/api/models/org/busy", 429, times=1, headers={"RateLimit": '"api";r=0;t=0',
                                                                 "RateLimit-Policy": '"fixed window";"api";q=500;w=300'})
    assert len(load_checkpoint("org/busy").tensors) == 18
    hub.inject(r"^/api/models/org/busy", 429, times=100, headers={"RateLimit": '"api";r=0;t=240'})
    with pytest.raises(RateLimitedError, match="retry after 240 s"):
        load_checkpoint("org/busy")


def test_429_asking_for_a_long_wait_fails_at_once(hub):
    hub.add_repo("org/busy", sharded_repo(1))
    hub.inject(r"^/api/models/org/busy", 429, times=100, headers={"Retry-After": "3600"})
    with pytest.raises(RateLimitedError, match="retry after 3600 s"):
        load_checkpoint("org/busy")
    assert len(hub.requests(r"^/api/models/org/busy")) == 1


def test_5xx_is_retried_then_reported(hub):
    hub.add_repo("org/down", sharded_repo(1))
    hub.inject(r"\.safetensors$", 503, times=1)
    assert len(load_checkpoint("org/down").tensors) == 18
    hub.inject(r"^/api/models/org/down", 500, times=100)
    with pytest.raises(NetworkError, match=r"failed with HTTP 500 on repo info in org/down after 3 attempts"):
        load_checkpoint("org/down")


def test_timeouts_are_retried_then_reported(hub, monkeypatch):
    monkeypatch.setenv("QCHECK_HUB_TIMEOUT", "1")  # the injected timeout sleeps 30 s: never answered in time
    hub.add_repo("org/slow", sharded_repo(1))
    hub.inject(r"^/api/models/org/slow", "timeout", times=1)
    assert len(load_checkpoint("org/slow").tensors) == 18
    hub.inject(r"^/api/models/org/slow", "timeout", times=100)
    with pytest.raises(NetworkError, match=r"timed out after 1 s reading repo info .* 3 attempts; raise it with "
                                           r"QCHECK_HUB_TIMEOUT"):
        load_checkpoint("org/slow")


def test_dropped_connections_are_retried(hub):
    hub.add_repo("org/reset", sharded_repo(1))
    hub.inject(r"\.safetensors$", "reset", times=1)
    assert len(load_checkpoint("org/reset").tensors) == 18


def test_connection_refused(monkeypatch, tmp_path):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("QCHECK_HUB_BACKOFF", "0.01")
    monkeypatch.setenv("QCHECK_HUB_RETRIES", "1")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(NetworkError, match=r"cannot connect to http://127.0.0.1:\d+: connection refused \(1 "
                                           r"attempt\).*HF_HUB_OFFLINE=1"):
        load_checkpoint("org/any")  # nothing listens: retrying cannot help, so no retry


def test_not_model_info_is_a_remote_error(hub):
    hub.add_repo("org/weird", sharded_repo(1))
    hub.inject(r"^/api/models/org/weird", 200, times=1)  # 200 with an error JSON body, no id/sha
    with pytest.raises(RemoteError, match="not model info"):
        resolve_target("org/weird")


def test_ambiguous_gguf_repo_is_a_usage_error_listing_the_quants(hub, tmp_path):
    g = gguf_bytes(str(tmp_path / "m.gguf"))
    hub.add_repo("org/q-GGUF", {"m-Q4_K_M.gguf": g, "m-Q8_0.gguf": g, "mmproj-F16.gguf": g})
    with pytest.raises(QcheckError, match=r"holds 2 GGUF models: Q4_K_M .*, Q8_0 .*; pick one with org/q-GGUF:Q4_K_M"):
        load_checkpoint("org/q-GGUF")


@pytest.mark.parametrize(("repo", "kwargs", "expect"), [
    ("meta/gated", {"gated": True}, "accept the licence"),
    ("org/down", {}, "HTTP 500"),
])
def test_cli_prints_one_line_exit_2_and_never_the_token(hub, repo, kwargs, expect):
    hub.echo_auth = True
    hub.add_repo(repo, sharded_repo(1), granted={"hf_someoneElseEntirely0000000"}, **kwargs)
    if repo == "org/down":
        hub.inject(r"^/api/models/org/down", 500, times=100)
    proc = _run_cli("inspect", repo, env=_env(hub, HF_TOKEN=TOKEN))
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    retries = [ln for ln in lines[:-1] if " retrying in " in ln]  # the waits announced before giving up
    assert len(retries) == len(lines) - 1 == (2 if repo == "org/down" else 0), proc.stderr
    assert lines[-1].startswith("qcheck: error:") and expect in lines[-1], proc.stderr
    assert TOKEN not in proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr


def test_cli_inspects_a_hub_repo_as_json(hub):
    sha = hub.add_repo("org/tiny", sharded_repo(2))
    proc = _run_cli("inspect", "org/tiny", "--json", env=_env(hub))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["container"] == "safetensors" and data["revision"] == sha
    assert data["path"] == "org/tiny"


def test_hostile_listing_names_and_sizes_are_refused(hub):
    hub.add_repo("org/evil", {"../../etc/passwd.safetensors": b"x", "config.json": b"{}"})
    from qcheck.errors import InputError

    with pytest.raises(InputError, match=r"unsafe file name '../../etc/passwd.safetensors'"):
        resolve_target("org/evil")


def test_listing_and_headers_are_bounded_by_the_limits(hub, tmp_path):
    from qcheck.errors import InputError
    from qcheck.limits import Limits

    hub.add_repo("org/tiny", sharded_repo(2))
    with pytest.raises(InputError, match=r"repo info is over 100 bytes \(limit max_json_bytes\)"):
        resolve_target("org/tiny", Limits(max_json_bytes=100))
    g = gguf_bytes(str(tmp_path / "m.gguf"), n_tokens_pad=60_000)
    hub.add_repo("org/big-GGUF", {"m-Q8_0.gguf": g})
    with pytest.raises(InputError, match="max_header_bytes"):
        load_checkpoint("org/big-GGUF", Limits(max_header_bytes=300_000))
    assert hub.bytes_sent(r"m-Q8_0\.gguf$") <= 300_000 + 100_001


def test_cli_check_of_a_hub_repo_with_memory_fit(hub):
    sha = hub.add_repo("nvidia/tiny", sharded_repo(2))
    proc = _run_cli("nvidia/tiny", "--engine", "vllm", "--gpu", "h100", "--context", "2048", "--json",
                    env=_env(hub))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["inspection"]["revision"] == sha
    mem = data["verdicts"][0]["memory"]
    # config.json: 6 layers x 1 KV head x head_dim 64/4 = 16, K+V, bfloat16, 2048 tokens
    assert mem["kv_cache_bytes"] == 6 * 1 * 16 * 2 * 2 * 2048
    # the H100's memory as its driver reports it to vLLM (matrices/gpus.toml: 79.19 GiB), not the marketed 80
    assert mem["fits"] is True and mem["gpu_memory_bytes"] == int(79.19 * 1024**3)
    assert len(hub.requests(r"^/api/models/nvidia/tiny")) == 1  # the checkpoint is read once
    # 4096 tokens is above the model's max_position_embeddings 2048: vLLM does not start with it
    proc = _run_cli("nvidia/tiny", "--engine", "vllm", "--gpu", "h100", "--context", "4096", "--json",
                    env=_env(hub))
    startup = json.loads(proc.stdout)["verdicts"][0]["startup"]
    assert proc.returncode == 1 and startup["outcome"] == "does-not-start", proc.stdout
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in startup["message"]


def test_a_retry_says_so_on_stderr(hub, capsys):
    hub.add_repo("org/flaky", sharded_repo(1))
    hub.inject(r"\.safetensors$", 503, times=1)
    assert len(load_checkpoint("org/flaky").tensors) == 18
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"qcheck: HTTP 503 from {hub.endpoint} (")
    assert err[0].endswith("(model-00001-of-00001.safetensors); retrying in 0.0 s (attempt 2 of 3)"), err


def test_an_unresolvable_host_fails_at_once_in_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HF_HUB_OFFLINE")}
    env.update({"HF_ENDPOINT": "http://qcheck-test-host.invalid", "QCHECK_HUB_RETRIES": "5",
                "QCHECK_HUB_BACKOFF": "2"})
    proc = _run_cli("inspect", "org/name", env=env)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [proc.stderr.strip()]  # one line, no "retrying"
    assert "cannot resolve the host of http://qcheck-test-host.invalid" in proc.stderr


def test_the_offline_hint_is_header_only(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(RemoteError) as info:
        load_checkpoint("org/not-cached")
    assert "hf download" not in str(info.value) and "reads only the headers" in str(info.value)


def test_an_unresolvable_host_is_never_retried(monkeypatch):
    import qcheck.net.client as client

    def no_sleep(seconds: float) -> None:
        raise AssertionError(f"waited {seconds} s to retry a host that does not resolve")

    monkeypatch.setattr(client.time, "sleep", no_sleep)
    monkeypatch.setenv("HF_ENDPOINT", "http://qcheck-test-host.invalid")
    monkeypatch.setenv("QCHECK_HUB_RETRIES", "5")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(NetworkError, match=r"cannot resolve the host of http://qcheck-test-host\.invalid"):
        load_checkpoint("org/name")
