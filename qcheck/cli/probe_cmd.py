"""``qcheck probe URL``: which OpenAI-compatible features a live endpoint really serves (docs/deploy.md)."""

from __future__ import annotations

import os

import click

from qcheck.cli.common import OutputSpec, finish, output_options_for


@click.command("probe")
@click.argument("url")
@click.option("--model", "-m", default=None, metavar="ID", help="Model id to probe (default: the first one listed).")
@click.option("--api-key-env", default="OPENAI_API_KEY", show_default=True, metavar="NAME",
              help="Environment variable holding the API key (the key is never printed; no --api-key on purpose: "
                   "a command line is visible to other users of the machine).")
@click.option("--require", "require", default="", metavar="CAP,...",
              help="Capabilities that must be supported, else exit 1: models, lora_adapters, max_context, logprobs, "
                   "top_logprobs, prompt_logprobs, n, logit_bias, stream, json_object, json_schema, tools, "
                   "tools_with_schema, stop.")
@click.option("--timeout", type=click.FloatRange(min=1, max=3600), default=120.0, show_default=True, metavar="S",
              help="Deadline for the whole probe, in seconds.")
@click.option("--request-timeout", type=click.FloatRange(min=0.5, max=600), default=30.0, show_default=True,
              metavar="S", help="Deadline for one request.")
@output_options_for(("text", "json", "junit", "markdown"), reports=False)
def command(url: str, model: str | None, api_key_env: str, require: str, timeout: float, request_timeout: float,
            output_spec: OutputSpec) -> int:
    """Probe URL (an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1): models and LoRA adapters, the
    context the server reports, logprobs and top_logprobs, prompt log-probs (echo), n > 1, logit_bias,
    streaming, response_format json_object and json_schema (the answer is validated), tools, tools with a
    schema, stop sequences. Each is supported, refused (with the server's message), broken (accepted but
    ignored or wrong) or unknown.

    \b
    Exit codes:
      0  every --require'd capability is supported (or none was required)
      1  a required capability is refused, broken or unknown
      2  unusable input: a bad URL, an unknown capability, the server unreachable
    """
    from qcheck.errors import UsageError
    from qcheck.probe import CAPABILITIES
    from qcheck.probe.checks import run_probe
    from qcheck.probe.http import Deadline, ProbeHTTPError, check_url

    required = [r.strip() for r in require.split(",") if r.strip()]
    unknown = [r for r in required if r not in CAPABILITIES]
    if unknown:
        raise UsageError(f"--require {','.join(unknown)}: unknown capability (known: {', '.join(CAPABILITIES)})")
    base = check_url(url)
    api_key = os.environ.get(api_key_env) or None
    try:
        result = run_probe(base, model=model, api_key=api_key, deadline=Deadline(timeout), timeout=request_timeout,
                           required=required)
    except ProbeHTTPError as exc:
        from qcheck.report.sanitize import mask

        raise UsageError(mask(f"cannot probe {base}: {exc}", api_key)) from None
    return finish(result, output_spec)
