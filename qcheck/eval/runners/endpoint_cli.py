"""``qcheck eval`` flags for endpoint candidates, turned into ``NAME=endpoint:URL#options`` candidate strings.

Kept apart from ``qcheck.eval.runners.endpoint`` so the command module stays a thin list of flags.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import urlencode, urlsplit

import click

from qcheck.errors import UsageError
from qcheck.net import origin

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


@dataclass(frozen=True)
class EndpointFlags:
    """The values of the ``--endpoint`` flag family, as click passes them."""

    endpoints: tuple[str, ...] = ()
    endpoint_model: str | None = None
    api_key_env: str | None = None
    endpoint_mode: str = "auto"
    endpoint_top_k: int = 20
    concurrency: int = 4
    request_timeout: float = 120.0
    retries: int = 5
    no_resume: bool = False

    @classmethod
    def pop_from(cls, values: dict[str, Any]) -> EndpointFlags:
        """Take this family's parameters out of a click command's keyword arguments."""
        return cls(**{f.name: values.pop(f.name) for f in fields(cls) if f.name in values})


def endpoint_candidates(flags: EndpointFlags) -> list[str]:
    """``--endpoint`` values as candidate strings for ``EvalConfig.candidates``."""
    out = []
    for text in flags.endpoints:
        name, sep, url = text.partition("=")
        if not sep or name.startswith(("http://", "https://")):
            name, url = "", text
        url = url.strip()
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise UsageError(f"--endpoint {text!r}: use [NAME=]http(s)://host[:port]")
        name = name.strip() or origin(url).split("://", 1)[-1]  # host[:port]: never the URL's user and password
        opts: list[tuple[str, Any]] = [("mode", flags.endpoint_mode), ("top_k", flags.endpoint_top_k),
                                       ("concurrency", flags.concurrency), ("timeout", flags.request_timeout),
                                       ("retries", flags.retries)]
        if flags.endpoint_model:
            opts.append(("model", flags.endpoint_model))
        if flags.api_key_env:
            opts.append(("api_key_env", flags.api_key_env))
        if flags.no_resume:
            opts.append(("resume", "0"))
        out.append(f"{name}=endpoint:{url.split('#', 1)[0]}#{urlencode(opts)}")
    return out
