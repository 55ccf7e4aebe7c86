"""The serving engines that size a KV pool from what is left of the GPU: vLLM, SGLang, TensorRT-LLM.

vLLM (``formula = "vllm"``), profile and subtract (0.33 and earlier)::

    KV pool = ceil(gpu_memory_utilization x total) - weights - non-torch - activation peak [- CUDA graphs]

where total is what ``cudaMemGetInfo`` reports, the activation peak is the profile run's (its sampler over
``min(max_num_seqs, max_num_batched_tokens)`` rows x vocabulary, or the forward pass at ``max_num_batched_tokens``
when that is larger), and the CUDA-graph estimate is subtracted from 0.21 on. vLLM 0.34's extensible KV cache
sizes the pool after warmup from measured free memory instead::

    KV pool = min(gpu_memory_utilization x total, total - CUDA context - max(1 GiB, 0.75 x peak)) - used - peak

SGLang: ``mem_fraction_static`` (its own heuristic from the nvidia-smi total, or the user's) of the memory free
before the weights load holds weights + KV. TensorRT-LLM: ``free_gpu_memory_fraction`` of what weights and
activations leave. Every constant is in the engine's ``[memory]`` table with its source (docs/memory.md).
"""

from __future__ import annotations

import math
from typing import ClassVar

from qcheck.matrix.memory_params import EngineMemory
from qcheck.memory.base import EngineFamily, activation_part, fixed_parts, gib
from qcheck.memory.device import DeviceMemory
from qcheck.memory.held import MXFP4_LAYOUTS, TensorSplit, mxfp4_backend
from qcheck.memory.records import GIB, MIB, Part, Reserve
from qcheck.memory.vllm_profile import ProfileRun, capture_sizes
from qcheck.model import Inspection, ModelShape


class TensorParallelWeights:
    """Weights as a tensor-parallel server engine holds them (qcheck.memory.held), shared by vLLM and SGLang."""

    mem: EngineMemory
    shape: ModelShape
    device: DeviceMemory
    model: Inspection | None

    def split(self) -> TensorSplit:
        backend = mxfp4_backend(self.mem.get("mxfp4_moe_backends"), self.device.arch, self.device.vendor)
        return TensorSplit(self.shape, self.model, MXFP4_LAYOUTS.get(backend) if backend else None)

    def weights_on(self, n: int) -> int | None:
        if not self.shape.from_tensors:
            return None
        return self.split().on_rank(n)

    def weights_how(self, n: int) -> str:
        return self.split().how(n) if self.shape.from_tensors else ""


class VLLMFamily(TensorParallelWeights, EngineFamily):
    """vLLM: the profile run's peak, non-torch memory and CUDA graphs come out of the KV budget."""

    formula = "vllm"
    sizes_kv_pool = True

    # -- the engine's own settings at this version and GPU
    def batch(self) -> tuple[int, int, str]:
        """(max_num_batched_tokens, max_num_seqs, why): the user's, else vLLM's default for the GPU's memory."""
        gpu = self.gpu_gib
        small = self.device.gpu in (self.mem.get("batch_small_gpus") or ())
        rows = self.mem.buckets.get("batch_defaults") or ()
        row = rows[0][1:] if small and rows else self.mem.bucket("batch_defaults", gpu)
        tokens = int(row[0]) if row else int(self.mem.get("max_num_batched_tokens", 2048))
        seqs = int(row[1]) if row else int(self.mem.get("max_num_seqs", 256))
        why = (f"vLLM's API-server defaults for a {gpu:.0f} GiB GPU" if gpu is not None else "vLLM's defaults") + \
            (" (A100 and GB10 keep the small tier)" if small else "")
        k = self.knobs
        if k.max_num_batched_tokens is not None or k.max_num_seqs is not None:
            why = "as set" if k.max_num_batched_tokens is not None and k.max_num_seqs is not None else why + \
                ", the rest as set"
        return (k.max_num_batched_tokens or tokens), (k.max_num_seqs or seqs), why

    def utilization(self) -> float:
        return float(self.knobs.gpu_memory_utilization or self.mem.get("gpu_memory_utilization", 0.92))

    def extensible(self) -> bool:
        """vLLM 0.34's extensible KV cache: on by default on CUDA and ROCm, off with --kv-cache-memory-bytes."""
        return bool(self.mem.get("extensible_kv")) and self.knobs.kv_cache_memory is None and \
            self.device.vendor in ("nvidia", "amd", None)

    def eager(self) -> bool:
        return bool(self.knobs.enforce_eager)

    # -- overhead
    def profile(self, tp: int) -> ProfileRun:
        """The profile run at this release's defaults (or the user's batch settings) on one of tp ranks."""
        tokens, seqs, _ = self.batch()
        layout = self.split().layout
        monolithic = self.split().mxfp4_moe and layout is not None and layout.name.startswith("triton")
        return ProfileRun(self.shape, self.mem, tokens, seqs, tp, self.act_bytes, monolithic)

    def activation(self, tp: int) -> Part:
        """The profile run's peak: the sampler run or the forward pass, whichever is larger (vllm_profile)."""
        tokens, seqs, why = self.batch()
        peak, how = self.profile(tp).peak()
        return Part("activation peak", peak, "formula",
                    f"profile run ({why}: max_num_batched_tokens {tokens}, max_num_seqs {seqs}); {how}")

    def nvls(self) -> bool:
        """Whether NCCL sets up NVLink SHARP buffers: an NVSwitch system (``nvls_gpus``); a GPU known only by its
        size counts as one (the larger figure)."""
        return self.device.gpu is None or self.device.gpu in (self.mem.get("nvls_gpus") or ())

    def non_torch(self, tp: int) -> Part:
        if tp > 1:
            key = "non_torch_mib_multi_gpu" if self.nvls() else "non_torch_mib_multi_gpu_no_nvls"
        else:
            key = "non_torch_mib"
        mib = float(self.mem.get(key, self.mem.get("non_torch_mib_multi_gpu" if tp > 1 else "non_torch_mib", 256)))
        where = ("" if tp == 1 else ", NCCL and all-reduce buffers" + (" with NVLink SHARP (NVSwitch)" if self.nvls()
                                                                         else " without NVLink SHARP"))
        return Part("non-torch", int(mib * MIB), "measured",
                    f"memory outside torch created after vLLM's startup snapshot (kernel images, attention "
                    f"workspaces{where}): {mib:g} MiB, fitted to published logs of this release")

    def graphs(self) -> Part | None:
        if self.eager():
            return None
        if not (self.extensible() or self.mem.get("graphs_subtracted")):
            return None
        tokens, seqs, _ = self.batch()
        largest = min(2 * seqs, int(self.mem.get("graph_capture_max", 512)), tokens)
        sizes = capture_sizes(largest)
        layers = max(1, self.shape.n_layers or self.layout.full_layers + self.layout.window_layers)
        first = float(self.mem.get("graph_first_mib", 119))
        per = float(self.mem.get("graph_mib_per_size_layer", 0.404))
        mib = first + per * max(0, sizes - 1) * layers
        return Part("CUDA graphs", int(mib * MIB), "measured",
                    f"vLLM's CUDA-graph estimate: {sizes} capture sizes up to {largest} (min(2 x max_num_seqs, "
                    f"512, max_num_batched_tokens)): {first:g} MiB first captures + {per:g} MiB x {sizes - 1} sizes "
                    f"x {layers} layers (fitted to the estimates vLLM 0.19 logged)")

    def overhead(self, ctx: int, batch: int, tp: int = 1) -> list[Part]:
        parts = [self.activation(tp), self.non_torch(tp)]
        graphs = self.graphs()
        if graphs is not None:
            parts.append(graphs)
        if self.mem.get("context_in_budget") and self.device.kind == "GPU":
            parts.append(Part("CUDA context", self.context_bytes(), "measured",
                              "this release counts the CUDA context in its non-torch memory, inside the budget"))
        return parts

    def kv_limit(self) -> int | None:
        return self.knobs.kv_cache_memory

    # -- usable memory
    def device_reserve(self, total: int) -> Reserve:
        u = self.utilization()
        requested = math.ceil(total * u)
        start_free = self.free_at_start(total)
        ctx = self.context_bytes()
        if self.knobs.kv_cache_memory is not None:
            return Reserve(start_free, f"{gib(total)} GiB - {gib(total - start_free)} GiB CUDA context; "
                           f"--kv-cache-memory-bytes {gib(self.knobs.kv_cache_memory)} GiB skips vLLM's budget")
        if self.extensible():
            margin = max(int(float(self.mem.get("warmup_margin_min_mib", 1024)) * MIB),
                         int(float(self.mem.get("warmup_margin_fraction", 0.75)) * self.activation(self.tp).bytes))
            usable = min(requested, start_free - margin)
            return Reserve(usable, f"min(gpu_memory_utilization {u:g} x {gib(total)} GiB, {gib(start_free)} GiB "
                                   f"free at start - {gib(margin)} GiB warmup margin): vLLM's extensible KV cache")
        text = f"gpu_memory_utilization {u:g} x {gib(total)} GiB"
        if requested > start_free:
            why = "measured free memory" if self.device.free_bytes is not None else f"the {gib(ctx)} GiB CUDA context"
            return Reserve(requested, text, refusal=(
                f"vLLM refuses to start: free memory on device ({gib(start_free)} GiB, after {why}) is less than "
                f"the desired GPU memory utilization ({u:g}, {gib(requested)} GiB); lower "
                "--gpu-memory-utilization"))
        return Reserve(requested, text)

    def notes(self) -> list[str]:
        tokens, seqs, why = self.batch()
        mode = ("extensible KV cache sized after warmup" if self.extensible() else "KV pool = budget - profiled "
                "use" + ("" if self.mem.get("graphs_subtracted") and not self.eager() else ", CUDA graphs outside "
                                                                                           "the budget"))
        return [*super().notes(), f"vLLM: gpu_memory_utilization {self.utilization():g}, max_num_batched_tokens "
                f"{tokens}, max_num_seqs {seqs} ({why}); {mode}" + ("; --enforce-eager: no CUDA graphs"
                                                                      if self.eager() else "")]


class SGLangFamily(TensorParallelWeights, EngineFamily):
    """SGLang: weights + KV cache fit in ``mem_fraction_static`` of the memory free before the weights load."""

    formula = "sglang"
    sizes_kv_pool = True

    def settings(self, tp: int) -> tuple[int, int, str]:
        """(chunked_prefill_size, decode cuda_graph_max_bs, why) for this GPU and tp."""
        smi = self.device.smi_bytes
        row = self.mem.bucket("reserve_buckets", smi / GIB if smi else None) or (4096.0, 160.0, 160.0)
        chunk = int(row[0])
        graph_bs = int(row[1] if tp < 4 else row[-1])
        why = f"SGLang's defaults for {smi / MIB:,.0f} MiB (nvidia-smi)" if smi else "SGLang's defaults"
        if self.knobs.chunked_prefill_size is not None:
            chunk, why = self.knobs.chunked_prefill_size, why + ", chunked_prefill_size as set"
        return chunk, graph_bs, why

    def prefill_graph_sizes(self, chunk: int) -> int:
        """How many prefill CUDA-graph sizes SGLang captures up to ``chunk`` tokens (its capture list)."""
        count = 0
        for first, last, step in self.mem.buckets.get("prefill_graph_steps", ()):
            value = int(first)
            while value <= min(last, chunk):
                count += 1
                value += int(step)
        return count

    def reserved_mib(self, tp: int) -> tuple[float, str]:
        """SGLang's reserved-memory heuristic (memory_hook.handle_gpu_memory_settings) and how it was built."""
        m = self.mem
        chunk, graph_bs, why = self.settings(tp)
        tokens = max(chunk if chunk > 0 else 16384, 2048)
        reserved = (m.get("reserve_base_mib", 512) + tokens * m.get("reserve_mib_per_prefill_token", 1.5)
                    + tp * m.get("reserve_mib_per_tp", 128) + graph_bs * m.get("reserve_mib_per_graph_seq", 2))
        prefill = 0.0
        if self.device.vendor in (m.get("prefill_graph_vendors") or ()) and chunk > 0:
            prefill = (m.get("reserve_mib_prefill_graphs_mla", 1536) if self.layout.mla_dim else
                       self.prefill_graph_sizes(chunk) * m.get("reserve_mib_per_prefill_graph", 8))
        reserved += prefill
        smi = self.device.smi_bytes
        large = m.get("large_gpu_gib")
        if large is not None and smi is not None and smi / GIB > large:
            reserved = max(reserved, m.get("reserve_min_mib_large", 10240))
        return reserved, (f"{why}: chunked_prefill_size {chunk}, decode cuda_graph_max_bs {graph_bs}"
                          + (f", {prefill:g} MiB of prefill graphs" if prefill else ""))

    def fraction(self, tp: int) -> tuple[float, str]:
        if self.knobs.mem_fraction_static is not None:
            return float(self.knobs.mem_fraction_static), "mem_fraction_static as set"
        smi = self.device.smi_bytes
        if not smi:
            return 0.95, "mem_fraction_static 0.95 (SGLang's value when the GPU memory is unknown)"
        reserved, why = self.reserved_mib(tp)
        smi_mib = smi / MIB
        frac = round((smi_mib - reserved) / smi_mib, 3)
        return frac, f"mem_fraction_static {frac:g} = ({smi_mib:,.0f} - {reserved:,.0f} reserved MiB) / " \
                     f"{smi_mib:,.0f} ({why})"

    def overhead(self, ctx: int, batch: int, tp: int = 1) -> list[Part]:
        total = self.device.total_bytes
        frac, why = self.fraction(tp)
        if total is None:
            return [Part("outside mem_fraction_static", 0, "source", why + "; GPU memory unknown")]
        pre_load = self.free_at_start(total)
        return [Part("outside mem_fraction_static", int(pre_load * (1 - frac)), "source",
                     f"{1 - frac:.3f} x the {gib(pre_load)} GiB free before the weights load: activations and CUDA "
                     f"graphs ({why})")]

    def device_reserve(self, total: int) -> Reserve:
        start = self.free_at_start(total)
        frac, _ = self.fraction(self.tp)
        return Reserve(start, f"{gib(total)} GiB - {gib(total - start)} GiB CUDA context; weights + KV within "
                              f"mem_fraction_static {frac:g} of it")

    def notes(self) -> list[str]:
        return [*super().notes(), f"SGLang: {self.fraction(self.tp)[1]}"]


class TensorRTFamily(VLLMFamily):
    """TensorRT-LLM: a max_num_tokens forward pass, and the KV cache gets ``free_gpu_memory_fraction`` of what
    weights and activations leave."""

    formula = "tensorrt-llm"
    what: ClassVar[str] = "max_num_tokens forward pass"

    def overhead(self, ctx: int, batch: int, tp: int = 1) -> list[Part]:
        tokens = int(self.mem.get("max_num_batched_tokens", 8192))
        seqs = int(self.mem.get("max_num_seqs", 2048))
        return [activation_part(self.shape, self.mem, tokens, min(seqs, tokens), self.what), *fixed_parts(self.mem)]

    def device_reserve(self, total: int) -> Reserve:
        frac = self.mem.get("kv_fraction_of_free", 0.9)
        start = self.free_at_start(total)
        return Reserve(start, f"{gib(start)} GiB free at start; the KV cache gets free_gpu_memory_fraction {frac:g} "
                              "of what weights and activations leave", kv_scale=1 / frac)

    def kv_limit(self) -> int | None:
        return None  # --kv-cache-memory-bytes is vLLM's

    def notes(self) -> list[str]:
        return EngineFamily.notes(self)
