"""Options and output handling shared by every command."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import click

from qcheck.limits import Limits
from qcheck.report import FORMATS, Result


def output_options_for(formats: tuple[str, ...], reports: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--format`` (one of ``formats``), ``--json``, ``-o`` and, with ``reports``, the extra report files
    (``--junit``, ``--sarif``, ``--markdown``, ``--github``): a command offers only what it can write."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def wrapper(*args: Any, fmt: str | None, as_json: bool, output: str | None, junit_path: str | None = None,
                    sarif_path: str | None = None, markdown_path: str | None = None, github: bool = False,
                    **kwargs: Any) -> Any:
            if as_json and fmt not in (None, "json"):
                raise click.UsageError("--json and --format disagree")
            extra = [(f, p) for f, p in (("junit", junit_path), ("sarif", sarif_path), ("markdown", markdown_path))
                     if p]
            kwargs["output_spec"] = OutputSpec(fmt="json" if as_json else (fmt or "text"), path=output, extra=extra,
                                               github=github)
            return func(*args, **kwargs)

        options = [
            click.option("--format", "fmt", type=click.Choice(formats), default=None,
                         help="Output format (default: text)."),
            click.option("--json", "as_json", is_flag=True, help="Same as --format json."),
            click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), default=None,
                         help="Write the report to FILE (atomically) instead of stdout."),
        ]
        if reports:
            options += [
                click.option("--junit", "junit_path", type=click.Path(dir_okay=False, writable=True), default=None,
                             metavar="FILE", help="Also write a JUnit XML report to FILE."),
                click.option("--sarif", "sarif_path", type=click.Path(dir_okay=False, writable=True), default=None,
                             metavar="FILE", help="Also write a SARIF 2.1.0 report to FILE (for code scanning)."),
                click.option("--markdown", "markdown_path", type=click.Path(dir_okay=False, writable=True),
                             default=None, metavar="FILE",
                             help="Also write a Markdown summary table to FILE (for a PR comment)."),
                click.option("--github", "github", is_flag=True,
                             help="Also print GitHub Actions annotations and append a summary to "
                                  "$GITHUB_STEP_SUMMARY."),
            ]
        for option in reversed(options):
            wrapper = option(wrapper)
        return wrapper

    return decorate


#: every format and report file: inspect, check, eval, gate
output_options = output_options_for(FORMATS)


def limit_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--limit NAME=VALUE`` (repeatable): raise or lower a parsing bound for this run."""

    @click.option("--limit", "limit_pairs", multiple=True, metavar="NAME=VALUE",
                  help="Override a parsing limit, e.g. --limit max_tensors=2000000 (see docs/limits.md).")
    @functools.wraps(func)
    def wrapper(*args: Any, limit_pairs: tuple[str, ...], **kwargs: Any) -> Any:
        overrides: dict[str, str] = {}
        for pair in limit_pairs:
            name, sep, value = pair.partition("=")
            if not sep:
                raise click.UsageError(f"--limit takes NAME=VALUE, not {pair!r}")
            overrides[name] = value
        kwargs["limits"] = Limits.from_env(overrides)
        return func(*args, **kwargs)

    return wrapper


def deploy_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """How the model is deployed, as every judging command asks it: ``--context``, ``--batch``, the KV-cache types
    (``--kv-cache-dtype T|K,V``, ``-ctk``, ``-ctv``), ``--tp/--pp/--ep`` and the engine settings named as the
    engines name them (``--gpu-memory-utilization``, ``--mem-fraction-static``, ``-ngl``, ``-np`` ...:
    ``qcheck.knobs.KNOBS``). The command gets ``deploy`` (a ``qcheck.request.Deploy``) and ``memory_asked`` (whether
    any memory question was asked)."""
    from qcheck.knobs import KNOBS, parse_knob

    @functools.wraps(func)
    def wrapper(*args: Any, context: int | None, batch: int | None, kv_cache_dtype: str | None,
                cache_type_k: str | None, cache_type_v: str | None, tp: int | None, pp: int | None,
                ep: int | None, host_bandwidth: float | None, **kwargs: Any) -> Any:
        from qcheck.request import Deploy, EngineKnobs, KVCacheTypes, Parallel

        given: dict[str, Any] = {}
        for knob in KNOBS:
            raw = kwargs.pop(f"knob_{knob.field}")
            if raw is not None and raw is not False:
                value = parse_knob(knob, raw)
                if value is not None:
                    given[knob.field] = value
        kv = KVCacheTypes.parse(kv_cache_dtype, cache_type_k, cache_type_v)
        kwargs["deploy"] = Deploy(context, batch or 1, kv, Parallel(tp, pp, ep), EngineKnobs(**given))
        kwargs["memory_asked"] = bool(given) or any(x is not None for x in (context, batch, kv_cache_dtype,
                                                                             cache_type_k, cache_type_v, tp, pp, ep))
        kwargs["host_bandwidth_gbs"] = host_bandwidth
        return func(*args, **kwargs)

    options = [
        click.option("--context", type=click.IntRange(min=1), default=None, metavar="N",
                     help="Estimate memory (weights + KV cache + overhead) for N tokens of context, per verdict "
                          "(docs/memory.md); default with --batch/--kv-cache-dtype: the engine's default context."),
        click.option("--batch", type=click.IntRange(min=1), default=None, metavar="B",
                     help="Concurrent sequences for the memory estimate (default 1)."),
        click.option("--kv-cache-dtype", default=None, metavar="T|K,V",
                     help="KV cache type, for K and V (T) or each (K,V, e.g. q8_0,q4_0): judged per engine x GPU x "
                          "version (a value the engine does not accept, or cannot run on the GPU, fails the verdict) "
                          "and used for the memory estimate: auto, bfloat16, fp8, fp8_e4m3, nvfp4, f16, q8_0, q4_0 ... "
                          "(default: what the checkpoint declares, else the model's dtype; f16 for GGUF)."),
        click.option("--cache-type-k", "-ctk", "cache_type_k", default=None, metavar="T",
                     help="KV cache type for K alone (llama.cpp's -ctk); overrides --kv-cache-dtype for K."),
        click.option("--cache-type-v", "-ctv", "cache_type_v", default=None, metavar="T",
                     help="KV cache type for V alone (llama.cpp's -ctv); overrides --kv-cache-dtype for V."),
        click.option("--tp", type=click.IntRange(min=1), default=None, metavar="N",
                     help="Tensor-parallel size to judge: heads, KV heads, FP8 blocks and AWQ/GPTQ groups must "
                          "divide over N ranks where the engine checks them (vLLM, SGLang, TensorRT-LLM, MLX, "
                          "ExLlamaV2; llama.cpp and ExLlamaV3 split without shape checks; Ollama has no --tp)."),
        click.option("--pp", type=click.IntRange(min=1), default=None, metavar="N",
                     help="Pipeline-parallel size to judge."),
        click.option("--ep", type=click.IntRange(min=1), default=None, metavar="N",
                     help="Expert-parallel size to judge (needs a MoE model)."),
        click.option("--host-bandwidth", type=click.FloatRange(min=0, min_open=True, max=100_000), default=None,
                     metavar="GB/S",
                     help="Host memory bandwidth in GB/s for the layers llama.cpp keeps in RAM (-ngl, --n-cpu-moe, "
                          "--fit): they decode at this speed (default by platform: docs/memory.md)."),
    ]
    for knob in KNOBS:
        if knob.kind == "flag":
            options.append(click.option(*knob.flags, f"knob_{knob.field}", is_flag=True, default=False,
                                        help=knob.help + "."))
        else:
            options.append(click.option(*knob.flags, f"knob_{knob.field}", default=None, metavar=knob.metavar,
                                        help=knob.help + "."))
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper


def strictness_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """How strictly the verdicts are judged, as every judging command asks it: ``--require-native``,
    ``--allow-unknown``, ``--require-kv-scales`` and ``--kernels-only``. The command gets them as ``strictness``
    (a ``qcheck.outcome.StrictnessFlags``)."""

    @functools.wraps(func)
    def wrapper(*args: Any, require_native: bool, allow_unknown: bool, require_kv_scales: bool, kernels_only: bool,
                **kwargs: Any) -> Any:
        from qcheck.outcome import StrictnessFlags

        kwargs["strictness"] = StrictnessFlags(require_native, allow_unknown, require_kv_scales, kernels_only)
        return func(*args, **kwargs)

    options = [
        click.option("--require-native", is_flag=True,
                     help="Treat a fallback (slower substitute kernel, layers moved to the CPU) as a failure."),
        click.option("--allow-unknown", is_flag=True, help="Do not fail when the matrix has no sourced answer."),
        click.option("--require-kv-scales", is_flag=True,
                     help="Fail a verdict whose quantised KV cache runs with default scales of 1.0 (the checkpoint "
                          "ships no k_scale/v_scale, or q/prob scales where FP8 attention needs them)."),
        click.option("--kernels-only", is_flag=True,
                     help="Judge the kernels only: what the engine does at start-up with the settings asked (refuses "
                          "for memory, lowers the context, moves layers to the CPU) is reported but does not set the "
                          "status or the exit code."),
    ]
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper


class OutputSpec:
    """Where a result goes: the main format and path, extra report files, and GitHub output."""

    def __init__(self, fmt: str, path: str | None, extra: list[tuple[str, str]] | None = None,
                 github: bool = False):
        self.fmt = fmt
        self.path = path
        #: (format, file) pairs written beside the main output: --junit, --sarif, --markdown
        self.extra = list(extra or [])
        #: --github: annotations on stdout and a summary appended to $GITHUB_STEP_SUMMARY
        self.github = github


def finish(result: Result, spec: OutputSpec) -> int:
    """Write the result in the requested format(s) and return its exit code (never format-dependent).

    Everything is rendered before anything is written, and each file is written atomically, so a
    failing renderer leaves no half-written report.
    """
    from qcheck.report import render, write_output
    from qcheck.report.sanitize import guard
    from qcheck.report.terminal import for_terminal, rendering_for, terminal_width

    to_stdout = not spec.path or spec.path == "-"
    if spec.fmt == "text" and to_stdout:
        with rendering_for(terminal_width(sys.stdout)):
            # wrapping can start a line with any word of a file's string: guard the wrapped lines again
            main = guard(for_terminal(render(result, spec.fmt), sys.stdout, result.kind))
    else:
        main = render(result, spec.fmt)
    extra = [(path, render(result, fmt)) for fmt, path in spec.extra]
    annotations = render(result, "github") if spec.github and spec.fmt != "github" else None
    writes = [*extra, *([(spec.path, main)] if spec.path and spec.path != "-" else [])]
    for path, text in writes:
        try:
            write_output(path, text)
        except OSError as exc:
            from qcheck.errors import QcheckError

            raise QcheckError(f"cannot write the report {path}: {exc.strerror or exc}") from None
    if to_stdout:
        sys.stdout.write(main)
    if annotations is not None:
        sys.stdout.write(annotations)
    sys.stdout.flush()
    if spec.github or spec.fmt == "github":
        from qcheck.report.github import write_step_summary

        try:
            write_step_summary(result)
        except OSError as exc:  # the summary is a courtesy: never let it change the verdict
            click.echo(f"qcheck: warning: cannot append to $GITHUB_STEP_SUMMARY: {exc.strerror or exc}", err=True)
    return result.exit_code
