"""``qcheck eval`` flags for endpoint candidates, turned into ``NAME=endpoint:URL#options`` candidate strings.

Kept apart from ``qcheck.eval.runners.endpoint`` so the command module stays a thin list of flags.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode, urlsplit

import click

from qcheck.errors import UsageError

MODES = ("auto", "prompt_logprobs", "sglang", "echo", "generate")


def endpoint_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The ``--endpoint`` flag family (applied to ``qcheck eval``)."""
    opts = [
        click.option("--endpoint", "endpoints", multiple=True, metavar="[NAME=]URL",
                     help="An OpenAI-compatible server to compare (vLLM, SGLang, llama-cpp-python, llama-server, "
                          "hosted); repeatable. Log-probs are top-k, so KLD is a lower bound."),
        click.option("--endpoint-model", default=None, metavar="MODEL",
                     help="Model name to request (default: the first model the server lists)."),
        click.option("--api-key-env", default=None, metavar="VAR",
                     help="Environment variable holding the endpoint's API key (the key is never printed)."),
        click.option("--endpoint-mode", type=click.Choice(MODES), default="auto", show_default=True,
                     help="How to get prompt log-probs; auto probes the server, generate = no log-probs."),
        click.option("--endpoint-top-k", type=click.IntRange(1, 1000), default=20, show_default=True,
                     help="Top-k log-probs to request per position."),
        click.option("--concurrency", type=click.IntRange(1, 256), default=4, show_default=True,
                     help="Concurrent requests per endpoint."),
        click.option("--request-timeout", type=click.FloatRange(0.1, 3600), default=120.0, show_default=True,
                     help="Seconds before a request is abandoned and retried."),
        click.option("--retries", type=click.IntRange(0, 50), default=5, show_default=True,
                     help="Retries on 429/5xx/timeouts, with exponential backoff (Retry-After honoured)."),
        click.option("--no-resume", is_flag=True,
                     help="Do not reuse or keep per-request endpoint results (default: resume an interrupted run)."),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return func


def endpoint_candidates(endpoints: tuple[str, ...], endpoint_model: str | None, api_key_env: str | None,
                        endpoint_mode: str, endpoint_top_k: int, concurrency: int, request_timeout: float,
                        retries: int, no_resume: bool) -> list[str]:
    """``--endpoint`` values as candidate strings for ``EvalConfig.candidates``."""
    out = []
    for text in endpoints:
        name, sep, url = text.partition("=")
        if not sep or name.startswith(("http://", "https://")):
            name, url = "", text
        url = url.strip()
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise UsageError(f"--endpoint {text!r}: use [NAME=]http(s)://host[:port]")
        name = name.strip() or parts.netloc
        opts: dict[str, Any] = {"mode": endpoint_mode, "top_k": endpoint_top_k, "concurrency": concurrency,
                                "timeout": request_timeout, "retries": retries}
        if endpoint_model:
            opts["model"] = endpoint_model
        if api_key_env:
            opts["api_key_env"] = api_key_env
        if no_resume:
            opts["resume"] = "0"
        out.append(f"{name}=endpoint:{url.split('#', 1)[0]}#{urlencode(opts)}")
    return out
