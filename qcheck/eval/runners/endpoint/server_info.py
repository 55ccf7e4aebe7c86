"""The KV cache type a server reports running with, where it reports one.

- SGLang 0.5.23: ``GET /server_info`` returns its resolved server arguments, ``kv_cache_dtype`` among them
  (sglang/srt/entrypoints/http_server.py:863-891, ``build_server_info`` in srt/utils/common.py:3584-3593).
- vLLM 0.34.0: ``GET /server_info?config_format=json`` returns ``vllm_config.cache_config.cache_dtype``, but only on a
  server started with development endpoints on (``VLLM_SERVER_DEV_MODE=1``; vllm/entrypoints/serve/__init__.py
  ``register_vllm_dev_api_routers``, dev/server_info/api_router.py).
- llama-server and llama-cpp-python's server report no cache type.
A server that answers otherwise (404, no such field) reports nothing; qcheck then keeps what was declared.
"""

from __future__ import annotations

from typing import Any

from qcheck.eval.runners.http import EndpointError

#: flavour -> (path, keys leading to the cache type in the JSON answer)
PROBES: dict[str, tuple[str, tuple[str, ...]]] = {
    "sglang": ("/server_info", ("kv_cache_dtype",)),
    "vllm": ("/server_info?config_format=json", ("vllm_config", "cache_config", "cache_dtype")),
}


def reported_kv_cache(client: Any, flavour: str) -> str | None:
    """The KV cache type the server says it stores (its own spelling, e.g. ``fp8_e4m3`` or ``auto``), or None."""
    probe = PROBES.get(flavour)
    if probe is None:
        return None
    path, keys = probe
    try:
        data = client.get(path, retry_statuses=frozenset())
    except EndpointError:
        return None
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    if isinstance(data, str) and 0 < len(data) <= 64:
        return data
    return None
