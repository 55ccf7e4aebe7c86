"""``qcheck eval --reference DIR --candidate PATH``: how much quality did quantisation cost, on these tasks?"""

from __future__ import annotations

import sys
from typing import Any

import click

from qcheck.cli.common import OutputSpec, finish, limit_options, output_options
from qcheck.eval.runners.endpoint_cli import EndpointFlags, endpoint_candidates, endpoint_options
from qcheck.limits import Limits


class Fraction(click.ParamType):
    """A number, or a percentage (``92%`` = 0.92), for agreement / accuracy thresholds."""

    name = "FRACTION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float):
            return value
        text = str(value).strip()
        try:
            return float(text[:-1]) / 100 if text.endswith("%") else float(text)
        except ValueError:
            self.fail(f"{value!r} is not a number or a percentage", param, ctx)


FRACTION = Fraction()
#: CLI flag -> Thresholds field
THRESHOLD_FLAGS = {
    "max_kld": ("--max-kld", float, "Fail when mean KL divergence (nats/token) exceeds this."),
    "max_kld_p99": ("--max-kld-p99", float, "Fail when the 99th percentile of per-token KLD exceeds this."),
    "max_kld_max": ("--max-kld-max", float, "Fail when the largest per-token KLD exceeds this."),
    "min_top1": ("--min-top1", FRACTION, "Fail when top-1 agreement is below this (0.92 or 92%)."),
    "max_ppl_ratio": ("--max-ppl-ratio", float, "Fail when PPL(candidate)/PPL(reference) exceeds this."),
    "max_delta_p_rms": ("--max-delta-p-rms", FRACTION, "Fail when RMS Δp of the correct token exceeds this."),
    "max_accuracy_drop": ("--max-accuracy-drop", FRACTION,
                          "Fail when accuracy drops by more than this (0.02 or 2% = 2 points)."),
    "min_recovery": ("--min-recovery", FRACTION, "Fail when accuracy(candidate)/accuracy(reference) is below this."),
    "max_flips": ("--max-flips", FRACTION, "Fail when the share of items whose correctness changed exceeds this."),
    "max_flips_c_to_i": ("--max-flips-c-to-i", FRACTION,
                         "Fail when the share of correct->incorrect items exceeds this."),
    "min_greedy_agreement": ("--min-greedy-agreement", FRACTION,
                             "Fail when the share of identical greedy generations is below this."),
    "max_kld_kv_only": ("--max-kld-kv-only", float,
                        "Fail when the KV cache alone (reference weights, the candidate's KV cache type) costs more "
                        "mean KLD than this."),
    "min_length_ratio": ("--min-length-ratio", float,
                         "Fail when generated tokens (candidate / reference, generate items) fall below this."),
    "max_length_ratio": ("--max-length-ratio", float,
                         "Fail when generated tokens (candidate / reference, generate items) exceed this."),
    "max_termination_drop": ("--max-termination-drop", FRACTION,
                             "Fail when the share of generations ending with end-of-sequence drops by more than "
                             "this (0.05 or 5% = 5 points)."),
    "max_repetition_increase": ("--max-repetition-increase", FRACTION,
                                "Fail when the repeated 4-gram share of generation tails rises by more than this."),
    "min_json_valid": ("--min-json-valid", FRACTION,
                       "Fail when the share of json items whose output parses and fits its schema is below this."),
    "max_json_validity_drop": ("--max-json-validity-drop", FRACTION,
                               "Fail when that share drops by more than this against the reference."),
    "min_coverage": ("--min-coverage", FRACTION,
                     "Fail when the candidate was measured on less than this share of the items or tokens."),
}


def threshold_options(func: Any) -> Any:
    for field_name, (flag, kind, help_text) in reversed(list(THRESHOLD_FLAGS.items())):
        func = click.option(flag, field_name, type=kind, default=None, help=help_text)(func)
    return func


def report_meta() -> dict[str, Any]:
    """What the HTML report needs to be reproducible and the JSON does not carry: date, command, versions."""
    import datetime

    from qcheck import __version__

    versions = {"qcheck": __version__}
    for name in ("torch", "transformers", "llama_cpp"):
        module = sys.modules.get(name)
        if module is not None and isinstance(getattr(module, "__version__", None), str):
            versions[name.replace("_", "-")] = module.__version__
    from qcheck.net import redact

    return {"generated": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": ["qcheck", *(redact(arg) for arg in sys.argv[1:])], "versions": versions}


def endpoint_run_id(reference: str, candidates: tuple[str, ...], resume: str | None, no_cache: bool,
                    no_resume: bool) -> str | None:
    """The id endpoint results of this run are kept under: ``--resume RUN``, else a new one, said on stderr before the
    run starts (a killed run prints nothing afterwards); None when no endpoint is involved or nothing is kept."""
    from qcheck.errors import UsageError
    from qcheck.eval.runners.http import new_run_id

    if resume is not None and (no_cache or no_resume):
        raise UsageError(f"--resume cannot be combined with {'--no-cache' if no_cache else '--no-resume'}")
    uses = reference.startswith(("http://", "https://")) or any("endpoint:" in c for c in candidates)
    if resume is not None or not uses or no_cache or no_resume:
        return resume
    run_id = new_run_id()
    click.echo(f"qcheck eval: endpoint results are kept as run {run_id}; after an interruption, continue with "
               f"--resume {run_id}", err=True)
    return run_id


@click.command("eval")
@click.option("--reference", "-r", required=True, metavar="DIR|FILE.gguf|URL",
              help="The unquantised model: a transformers directory (config.json, safetensors, tokenizer), an "
                   "F32/F16/BF16 GGUF (converted once by transformers' GGUF conversion and cached; a quantised "
                   "GGUF is refused: it is what gets measured), or an OpenAI-compatible endpoint serving it: "
                   "URL[#model=M&top_k=K|full&api_key_env=VAR] with --reference-files.")
@click.option("--reference-adapter", is_flag=True,
              help="Merge the PEFT adapter in the reference folder (adapter_config.json, adapter_model.safetensors) "
                   "into the reference; by default an adapter there is left out and the report says so.")
@click.option("--reference-files", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="With an endpoint --reference: a local folder with its tokenizer and config.json (no weights).")
@click.option("--candidate", "-c", "candidates", multiple=True, metavar="[NAME=]PATH",
              help="A quantised checkpoint to compare (GGUF file, model directory; llamacpp:PATH.gguf runs it "
                   "with llama.cpp's kernels); repeatable.")
@endpoint_options
@click.option("--tasks", "-t", multiple=True, metavar="FILE|NAME",
              help="JSONL task file, directory of them, or a bundled set name; repeatable (default: all bundled).")
@click.option("--reference-dtype", type=click.Choice(["float32", "bfloat16", "float16"]), default="float32",
              show_default=True, help="dtype the reference (and the simulated candidates) compute in.")
@click.option("--device", type=click.Choice(["cpu", "cuda", "auto"]), default="cpu", show_default=True,
              help="cpu, cuda, or auto: accelerate's device_map='auto' (GPUs, CPU, then disk offload).")
@click.option("--max-memory", "max_memory", multiple=True, metavar="DEVICE=SIZE",
              help="With --device auto: memory accelerate may use per device (0=20GiB, cpu=64GiB); the rest of the "
                   "reference is offloaded to disk. Repeatable.")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
              help="Reference cache root (default $QCHECK_CACHE_DIR or ~/.cache/qcheck).")
@click.option("--no-cache", is_flag=True, help="Compute the reference in a temporary directory and discard it (and keep "
              "no endpoint results).")
@click.option("--resume", "resume", default=None, metavar="RUN",
              help="Continue an interrupted run with endpoints: reuse the endpoint results it kept under the cache "
                   "(its id is printed when it starts), if each server still answers as it did.")
@click.option("--cache-topk", type=click.IntRange(1, None), default=None, metavar="K",
              help="Cache only the reference's top-K log-probs + tail mass (KLD becomes a lower bound).")
@click.option("--max-length", type=click.IntRange(8, 1_000_000), default=512, show_default=True,
              help="Tokens per window: longer text items are scored in sliding windows (see --stride); longer "
                   "choice/generate items are left-truncated.")
@click.option("--stride", type=click.IntRange(1, None), default=None, metavar="N",
              help="Sliding-window step for long text items (default max-length / 2): each window scores only its "
                   "last N tokens, the rest is context (llama-perplexity scores the second half of each window).")
@click.option("--windows", type=click.Choice(["sliding", "chunks"]), default="sliding", show_default=True,
              help="How long text items are windowed: sliding (overlapping, every token scored once) or chunks "
                   "(llama-perplexity's scheme: non-overlapping windows, each scoring its second half, BOS at "
                   "each start; numbers comparable with llama-perplexity --kl-divergence on the same text).")
@click.option("--max-items", type=click.IntRange(1, None), default=None, help="Use only the first N items.")
@click.option("--choice-metric", type=click.Choice(["acc", "acc_norm", "acc_bytes"]), default="acc",
              show_default=True, help="How choice items are judged (lm-eval: acc, acc_norm by chars, acc_bytes).")
@click.option("--noise-floor", is_flag=True,
              help="Also score the reference against itself in another dtype (bfloat16; float16 when the reference "
                   "computes in bfloat16), shown beside the candidates so a KLD has a scale. Never gated.")
@click.option("--noise-floor-dtype", type=click.Choice(["float32", "bfloat16", "float16"]), default=None,
              help="The dtype of the --noise-floor row (implies --noise-floor).")
@click.option("--activation-quant", is_flag=True,
              help="With --simulate-engine weights: fake-quantise activations for W8A8/W4A4 formats.")
@click.option("--simulate-engine", type=click.Choice(["auto", "llama.cpp", "vllm", "sglang", "weights"]),
              default="auto", show_default=True,
              help="Whose arithmetic simulated candidates reproduce around their dequantised weights: the activations "
                   "its kernels quantise and its KV cache (auto: llama.cpp for GGUF, vllm otherwise; weights: the "
                   "dequantised weights alone).")
@click.option("--kv-cache-dtype", "kv_cache_dtype", multiple=True, metavar="[NAME=]T|K,V",
              help="KV cache type for every candidate (q8_0, q4_0, ... for llama.cpp; fp8 for vLLM/SGLang), or K,V; "
                   "NAME=T for one candidate. Repeatable.")
@click.option("--cache-type-k", "cache_type_k", multiple=True, metavar="[NAME=]T",
              help="The K cache's type alone (llama.cpp -ctk); NAME=T for one candidate.")
@click.option("--cache-type-v", "cache_type_v", multiple=True, metavar="[NAME=]T",
              help="The V cache's type alone (llama.cpp -ctv); NAME=T for one candidate.")
@click.option("--kv-split/--no-kv-split", default=True, show_default=True,
              help="With a KV cache type: also measure the weights alone and the KV cache alone.")
@click.option("--tier", type=click.Choice(["near-lossless", "good", "acceptable"]), default=None,
              help="Default thresholds (mean KLD, top-1) from published llama.cpp scales; flags override.")
@threshold_options
@click.option("--gate-on-intervals", is_flag=True,
              help="Gate on the unfavourable end of each 95% interval instead of the point estimate.")
@click.option("--bootstrap", type=click.IntRange(100, 100_000), default=1000, show_default=True,
              help="Bootstrap replicates for the intervals.")
@click.option("--seed", type=int, default=None, help="Bootstrap seed (default fixed: results are reproducible).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Also write a self-contained HTML report to this file.")
@click.option("--progress/--no-progress", default=None,
              help="Progress on stderr (default: with text output): a bar on a terminal, else a line every "
                   "QCHECK_PROGRESS_INTERVAL seconds (30) with an ETA.")
@output_options
@limit_options
def command(reference: str, reference_adapter: bool, reference_files: str | None, candidates: tuple[str, ...], tasks: tuple[str, ...],
            reference_dtype: str, device: str, max_memory: tuple[str, ...], cache_dir: str | None, no_cache: bool,
            resume: str | None, cache_topk: int | None,
            max_length: int, stride: int | None, windows: str, max_items: int | None,
            choice_metric: str, noise_floor: bool, noise_floor_dtype: str | None, activation_quant: bool,
            simulate_engine: str, kv_cache_dtype: tuple[str, ...], cache_type_k: tuple[str, ...],
            cache_type_v: tuple[str, ...], kv_split: bool, tier: str | None, gate_on_intervals: bool, bootstrap: int,
            seed: int | None, report_path: str | None, progress: bool | None, output_spec: OutputSpec,
            limits: Limits, **threshold_values: Any) -> int:
    """Measure quantisation loss of each CANDIDATE against the unquantised REFERENCE, on your tasks.

    Both sides score the same token ids (the reference's tokenizer). The reference's log-probs are
    cached on disk, so further candidates and later runs only pay for the candidate.

    \b
    The reference must be unquantised, one of:
      DIR          the original release: config.json, safetensors, tokenizer
      FILE.gguf    an F32, F16 or BF16 GGUF (convert_hf_to_gguf.py --outtype f16)
      URL          a server running it, with --reference-files DIR (tokenizer,
                   config.json)
    A quantised GGUF cannot be the reference: it is the candidate.

    Reported: mean/median/p99/max KL divergence, top-1 agreement, Δp, PPL ratio, NLL correlation,
    accuracy (reference and candidate), recovery, flips in both directions, greedy agreement, with
    95% intervals (per-document bootstrap, Wilson, McNemar exact).

    Exit codes: 0 every candidate passed its thresholds (or none were set); 1 a threshold failed;
    2 the input could not be judged (bad task file, vocabulary/BOS mismatch, missing the eval extra).
    """
    from qcheck.eval.config import parse_kv_flags
    from qcheck.eval.gate import Thresholds
    from qcheck.eval.run import EvalConfig, default_noise_floor_dtype, run_eval
    from qcheck.eval.stats import DEFAULT_SEED

    # the --endpoint flag family (qcheck.eval.runners.endpoint_cli), taken out of **kwargs before thresholds
    flags = EndpointFlags.pop_from(threshold_values)
    candidates = (*candidates, *endpoint_candidates(flags))
    run_id = endpoint_run_id(reference, candidates, resume, no_cache, flags.no_resume)
    thresholds = Thresholds.for_tier(tier) if tier else Thresholds()
    explicit = {k: v for k, v in threshold_values.items() if v is not None}
    if explicit:
        thresholds = Thresholds.from_mapping(explicit, base=thresholds)
    thresholds.use_intervals = gate_on_intervals
    show_progress = progress if progress is not None else output_spec.fmt == "text"
    from qcheck.eval.runners.reference import parse_max_memory

    kv_cache, kv_by_candidate = parse_kv_flags(kv_cache_dtype, cache_type_k, cache_type_v)
    config = EvalConfig(reference=reference, reference_files=reference_files, candidates=list(candidates),
                        simulate_engine=simulate_engine, kv_cache=kv_cache, kv_cache_by_candidate=kv_by_candidate,
                        kv_split=kv_split,
                        max_memory=parse_max_memory(max_memory) or None,
                        tasks=list(tasks),
                        reference_dtype=reference_dtype, device=device, cache_dir=cache_dir, use_cache=not no_cache,
                        cache_topk=cache_topk, max_length=max_length, stride=stride, windows=windows, thresholds=thresholds,
                        activation_quant=activation_quant, choice_metric=choice_metric, bootstrap=bootstrap,
                        run_id=run_id, resume=resume is not None, reference_adapter=reference_adapter,
                        seed=DEFAULT_SEED if seed is None else seed, max_items=max_items, limits=limits,
                        progress=show_progress,
                        noise_floor=noise_floor_dtype or (default_noise_floor_dtype(reference_dtype) if noise_floor
                                                          else None))
    on_event = None
    if show_progress:
        def on_event(message: str) -> None:
            from qcheck.report.sanitize import safe_line

            click.echo(safe_line(f"qcheck eval: {message}"), err=True)
    result = run_eval(config, on_event=on_event)
    if report_path:
        from qcheck.eval.html import render_html
        from qcheck.report import write_output
        from qcheck.report.sanitize import sanitized

        write_output(report_path, render_html(sanitized(result.to_json()), sanitized(report_meta())))
    return finish(result, output_spec)
