"""What fits the GPUs named: when the deployment asked does not fit them whole (layers left in RAM, a context the
engine lowers, an engine that does not start), the other ways to run the same model on the same GPUs, each one a
deployment judged exactly as the one asked (``Verdict.options``; JSON ``verdicts[].options``):

* ``as-asked``: the deployment itself, for comparison (its split, its speed);
* ``gpu-layers``: every layer on the GPU when the user pinned a split (``-ngl``, ``--n-cpu-moe``); when that alone
  fits whole, no KV type or quant is offered (they are not needed);
* ``context``: the largest context with the whole model on the GPUs named (``MemoryEstimate.max_context_asked_gpus``);
* ``kv-cache``: a smaller KV-cache type the engine accepts there (judged by the matrix like ``--kv-cache-dtype``):
  the largest one below the current, and when that is not enough the smallest, each with what it buys at the context
  asked (the whole model on the GPU, or fewer layers in RAM) and the largest context it allows;
* ``budget``: vLLM's ``--gpu-memory-utilization`` raised to the least value that starts (the engine's fraction knob);
* ``quant``: a smaller quant of the same model beside it (the GGUF files of the model's directory or Hub repo: same
  architecture, layers and parameter count), the largest one that fits whole, else the smallest;
* ``more-gpus``: the GPU count the model needs, only as a labelled alternative (never silently more GPUs than named).

Each option's settings are spelled as the engine takes them (``qcheck.spelling``: flag tables, Modelfile
parameters, environment variables) and each is re-judged through the pipeline's ``judge`` on the verdict's own
engine and GPU (``JudgeOne``, handed in by the pipeline): its status, memory, start-up and speed come from the one
memory and speed code, never from a formula here.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from qcheck.memory.records import GIB, DeploymentOption, OffloadPlan

if TYPE_CHECKING:
    from qcheck.hub.select import GgufChoice
    from qcheck.matrix.loader import Matrix
    from qcheck.memory.records import MemoryEstimate
    from qcheck.model import Inspection, Verdict
    from qcheck.request import CheckRequest, Deploy, KVCacheTypes
    from qcheck.source import FileSet

__all__ = ["JudgeOne", "add_options", "needs_options"]

#: the pipeline's verdict for a variant of the request on the verdict's own engine and GPU (None: not judged)
JudgeOne = Callable[["Verdict", "Inspection", "CheckRequest"], "Verdict | None"]
#: start-up outcomes that mean the deployment does not run whole on the GPUs named as asked
_SHORT = ("does-not-start", "offloaded", "context-lowered")
#: the other quants of a model read to find a smaller one (their headers only)
MAX_SIBLINGS = 8
#: vLLM-style budget fractions tried, in order (the first that starts is given)
_BUDGETS = (0.92, 0.95, 0.97, 0.98, 0.99)
#: lower fractions tried for a deployment on more GPUs that their free memory refuses (nearest first)
_LOWER_BUDGETS = (0.85, 0.8, 0.75, 0.7)


def needs_options(v: Verdict) -> bool:
    """Whether the verdict's deployment falls short on the GPUs named: it runs (or only its start-up fails), a GPU
    product with memory was named, and the model does not fit whole as asked."""
    from qcheck.outcome import decided_by_startup

    m = v.memory
    if m is None or m.gpu_memory_bytes is None or m.device != "GPU" or m.kv_cache_bytes is None:
        return False
    if v.status not in ("native", "fallback") and not (v.status == "unsupported" and decided_by_startup(v)):
        return False
    return m.fits is False or (v.startup is not None and v.startup.outcome in _SHORT)


def add_options(verdicts: Iterable[Verdict], inspection: Inspection, request: CheckRequest, matrix: Matrix,
                judge_one: JudgeOne) -> None:
    """Fill ``Verdict.options`` for every verdict whose deployment does not fit the GPUs named whole. The model's
    smaller quants are read once for all of them (one Hub listing, each header once), and only when one is needed."""
    siblings = _Once(_smaller_siblings(inspection, request))
    for v in verdicts:
        if needs_options(v):
            v.options = _Options(v, inspection, request, matrix, judge_one, siblings).all()


@dataclasses.dataclass
class _Options:
    """The options of one verdict: each a variant of the request, judged by ``judge_one``."""

    verdict: Verdict
    inspection: Inspection
    request: CheckRequest
    matrix: Matrix
    judge_one: JudgeOne
    siblings: Iterable[_Sibling]

    @property
    def memory(self) -> MemoryEstimate:
        assert self.verdict.memory is not None
        return self.verdict.memory

    @property
    def engine(self) -> str:
        return self.verdict.engine

    @property
    def gpus(self) -> int:
        return self.memory.tp or 1

    def all(self) -> list[DeploymentOption]:
        asked = self.as_asked()
        layers = self.gpu_layers()
        if layers is not None and layers.startup == "starts" and layers.fits:
            # the split the user pinned is all that keeps it off the GPU: no other type or quant is needed
            out = [layers, self.context(), self.more_gpus()]
        else:
            out = [layers, self.context(), *self.kv_types(), self.budget(), self.quant(), self.more_gpus()]
        return [asked, *(o for o in out if o is not None and _helps(o, asked))]

    # -- judging a variant
    def judge(self, deploy: Deploy, inspection: Inspection | None = None, target: str | None = None
              ) -> Verdict | None:
        changes: dict[str, object] = {"deploy": deploy, "options": False, "capacity": False}
        if target is not None:
            changes["target"] = target
        got = self.judge_one(self.verdict, inspection or self.inspection, self.request.replace(**changes))
        return got if got is not None and got.memory is not None else None

    def whole(self, deploy: Deploy) -> Deploy:
        """The deployment with every layer on the GPU when the user pinned a split (-ngl, --n-cpu-moe): an option
        that fits whole keeps no layer in RAM."""
        knobs = deploy.knobs
        if knobs.n_gpu_layers is None and knobs.n_cpu_moe is None:
            return deploy
        layers = (self.inspection.shape.n_layers if self.inspection.shape is not None else 0) or 0
        return dataclasses.replace(deploy, knobs=dataclasses.replace(knobs, n_gpu_layers=layers + 1, n_cpu_moe=None))

    def whole_flags(self, deploy: Deploy) -> list[str]:
        if deploy.knobs.n_gpu_layers is None or deploy.knobs is self.request.deploy.knobs:
            return []
        return _words(self.engine, "knobs.n_gpu_layers", deploy.knobs.n_gpu_layers)

    # -- the options
    def as_asked(self) -> DeploymentOption:
        d, m = self.request.deploy, self.memory
        flags = _words(self.engine, "context", d.context) if d.context else []
        if d.kv_cache.given:
            flags += _kv_words(self.engine, m.kv_cache_type_k or "", m.kv_cache_type_v or "")
        if d.knobs.n_gpu_layers is not None:
            flags += _words(self.engine, "knobs.n_gpu_layers", d.knobs.n_gpu_layers)
        label = "as asked" + (f" ({' '.join(flags)})" if flags else "")
        return _option("as-asked", label, flags, {}, self.verdict, self.gpus)

    def gpu_layers(self) -> DeploymentOption | None:
        """Every layer on the GPU when the user pinned a split (-ngl, --n-cpu-moe) that keeps some in RAM."""
        whole = self.whole(self.request.deploy)
        if whole is self.request.deploy:
            return None
        got = self.judge(whole)
        if got is None:
            return None
        flags = self.whole_flags(whole)
        label = " ".join(flags) or "every layer on the GPU"
        return _option("gpu-layers", label, flags, {"n_gpu_layers": whole.knobs.n_gpu_layers}, got, self.gpus)

    def context(self) -> DeploymentOption | None:
        """The largest context with the whole model on the GPUs named."""
        m = self.memory
        best = m.max_context_asked_gpus
        if not best or best >= m.context:
            return None
        deploy = self.whole(dataclasses.replace(self.request.deploy, context=best))
        got = self.judge(deploy)
        if got is None:
            return None
        flags = _words(self.engine, "context", best) + self.whole_flags(deploy)
        return _option("context", " ".join(flags) or f"context {best}", flags, {"context": best}, got, self.gpus)

    def kv_types(self) -> list[DeploymentOption]:
        """Smaller KV types the engine accepts here: the largest (least lossy), and the smallest when that is not
        enough to fit whole."""
        judged: list[tuple[str, Verdict]] = []
        for name in _smaller_kv_types(self.matrix, self.engine, self.memory):
            deploy = self.whole(dataclasses.replace(self.request.deploy, kv_cache=_kv(name)))
            got = self.judge(deploy)
            kv_status = next((d.status for d in got.dimensions if d.dimension == "kv-cache"), None) if got else None
            if got is None or kv_status in ("unsupported", "unknown") or got.status == "unknown":
                continue  # the engine refuses this type here, or no rule vouches for it: not an option
            judged.append((name, got))
            if len(judged) == 1 and _whole(got):
                break
        picked = judged[:1] + ([judged[-1]] if len(judged) > 1 else [])
        out = []
        for name, got in picked:
            flags = _kv_words(self.engine, name, name) + self.whole_flags(self.whole(self.request.deploy))
            label = " ".join(flags) or f"KV cache {name} (no flag of {self.engine} sets it)"
            out.append(_option("kv-cache", label, flags, {"kv_cache": {"k": name, "v": name}}, got, self.gpus))
        return out

    def budget(self) -> DeploymentOption | None:
        """The engine's memory fraction (vLLM --gpu-memory-utilization) raised to the least value that starts."""
        if self.verdict.startup is None or self.verdict.startup.outcome != "does-not-start":
            return None
        found = self.budget_that_starts(self.request.deploy, raise_only=True)
        if found is None:
            return None
        field, value, got = found
        flags = _words(self.engine, f"knobs.{field}", value)
        return _option("budget", " ".join(flags) or f"{field} {value}", flags, {field: value}, got, self.gpus)

    def budget_that_starts(self, deploy: Deploy, *, raise_only: bool
                           ) -> tuple[str, float, Verdict] | None:
        """The engine's memory fraction nearest the current one with which ``deploy`` starts: raised when the KV pool
        is short, lowered too when the GPUs' free memory is below it (vLLM's check under tensor parallelism)."""
        field, current = _budget_knob(self.matrix, self.verdict, deploy)
        if field is None or current is None:
            return None
        values = [b for b in _BUDGETS if b > current]
        if not raise_only:
            values = sorted(values + [b for b in _LOWER_BUDGETS if b < current], key=lambda b: abs(b - current))
        for value in values:
            knobs = dataclasses.replace(deploy.knobs, **{field: value})  # type: ignore[arg-type]
            got = self.judge(dataclasses.replace(deploy, knobs=knobs))
            if got is not None and got.startup is not None and got.startup.outcome == "starts":
                return field, value, got
        return None

    def quant(self) -> DeploymentOption | None:
        """A smaller quant of the same model beside it: the largest that fits whole, else the smallest."""
        judged: list[tuple[_Sibling, Verdict]] = []
        for sibling in self.siblings:
            got = self.judge(self.whole(self.request.deploy), sibling.inspection, sibling.inspection.path)
            if got is not None and got.status in ("native", "fallback", "unsupported"):
                judged.append((sibling, got))
                if _whole(got):
                    break
        if not judged:
            return None
        sibling, got = next(((s, g) for s, g in judged if _whole(g)), judged[-1])
        ins = sibling.inspection
        flags, shown = _model_words(self.engine, sibling)
        whole = self.whole_flags(self.whole(self.request.deploy))
        size = f"{(ins.size_bytes or 0) / 1e9:.2f} GB"
        label = f"{' '.join(shown + whole) if flags else _display_name(ins.path)} ({_quant_name(ins)}, {size})"
        opt = _option("quant", label, flags + whole, {"model": ins.path}, got, self.gpus)
        opt.model = ins.path
        return opt

    def more_gpus(self) -> DeploymentOption | None:
        """The GPU count the model needs, as a labelled alternative: tensor parallelism re-judged at that size; a
        layer split from the estimate's own device count (its layers run one GPU after another: no speed given)."""
        m = self.memory
        need = m.gpus_needed
        if not need or need <= self.gpus:
            return None
        label = f"with {need} GPUs (more than named)"
        if m.parallelism == "tensor":
            deploy = dataclasses.replace(self.request.deploy,
                                         parallel=dataclasses.replace(self.request.deploy.parallel, tp=need))
            got = self.judge(deploy)
            if got is None:
                return None
            flags = _words(self.engine, "tp", need)
            settings: dict[str, object] = {"tp": need}
            if got.startup is not None and got.startup.outcome == "does-not-start":
                found = self.budget_that_starts(deploy, raise_only=False)
                if found is not None:
                    field, value, got = found
                    flags += _words(self.engine, f"knobs.{field}", value)
                    settings[field] = value
            return _option("more-gpus", f"{' '.join(flags)} ({need} GPUs, more than named)" if flags else label,
                           flags, settings, got, need)
        return DeploymentOption(
            "more-gpus", label, [], {"gpus": need},
            self.verdict.status, None, True, m.context, need, m.per_gpu_bytes, 0, None,
            m.max_context if m.max_context_gpus == need else None, None, None,
            f"{label}: {self.engine} splits the layers over the GPUs it sees, {_gib(m.per_gpu_bytes)} GiB each at "
            f"{m.context} tokens (one GPU works at a time: no faster than one GPU holding it all)")


# ------------------------------------------------------------------------------------------ helpers
def _words(engine: str, target: str, value: object) -> list[str]:
    from qcheck.spelling import spell

    spelled = spell(engine, target, value)
    return [] if spelled is None else (list(spelled.words) if spelled.where == "argv" else [spelled.text])


def _kv_words(engine: str, k: str, v: str) -> list[str]:
    from qcheck.spelling import spell_kv

    out: list[str] = []
    for spelled in spell_kv(engine, k, v) or []:
        out += list(spelled.words) if spelled.where == "argv" else [spelled.text]
    return out


def _kv(name: str) -> KVCacheTypes:
    from qcheck.request import KVCacheTypes

    return KVCacheTypes(name, name)


def _helps(option: DeploymentOption, asked: DeploymentOption) -> bool:
    """Whether an option does better than the deployment asked: it starts where that does not, keeps fewer bytes in
    RAM, or holds a longer context whole on the GPUs."""
    if option.kind == "more-gpus" or option.startup == "starts":
        return True
    if option.startup == "does-not-start":
        return False  # its own max context is the ``context`` option
    return (option.ram_bytes < asked.ram_bytes or (option.max_context or 0) > (asked.max_context or 0)
            or (asked.startup == "does-not-start" and option.startup not in ("does-not-start", "unknown", None)))


def _whole(v: Verdict) -> bool:
    """The deployment starts with the whole model on the GPUs (no layer in RAM, no context lowered)."""
    return v.startup is not None and v.startup.outcome == "starts" and v.memory is not None and v.memory.fits is True


def _smaller_kv_types(matrix: Matrix, engine: str, m: MemoryEstimate) -> list[str]:
    """The KV types the engine's flag accepts that are smaller than the current one, one per size, largest first."""
    from qcheck.errors import UsageError
    from qcheck.kvtypes import KV_DTYPE_BYTES, normalise_kv

    try:
        spec = matrix.engine(engine).kv_cache
    except UsageError:
        return []
    if spec is None:
        return []
    current = max(KV_DTYPE_BYTES.get(normalise_kv(t or ""), 0.0) for t in (m.kv_cache_type_k, m.kv_cache_type_v))
    by_size: dict[float, str] = {}
    for name in spec.accepts:
        size = KV_DTYPE_BYTES.get(normalise_kv(name))
        if name != "auto" and size is not None and size < current and size not in by_size:
            by_size[size] = name
    return [by_size[s] for s in sorted(by_size, reverse=True)]


def _budget_knob(matrix: Matrix, v: Verdict, deploy: Deploy) -> tuple[str | None, float | None]:
    """The engine's memory-fraction knob (a ``fraction`` knob its memory model reads) and its value here: the one
    asked, else the engine's default at the judged version (None: none, or a default qcheck does not know)."""
    from qcheck.errors import UsageError
    from qcheck.knobs import KNOBS
    from qcheck.memory.estimate import MemoryTarget

    try:
        params = matrix.engine(v.engine).memory
    except UsageError:
        return None, None
    if params is None:
        return None, None
    knob = next((k for k in KNOBS if k.kind == "fraction" and params.formula in k.formulas), None)
    if knob is None:
        return None, None
    asked = getattr(deploy.knobs, knob.field)
    if asked is not None:
        return knob.field, float(asked)
    at = MemoryTarget(v.engine, params, engine_version=v.engine_version).params_at()
    default = at.get(knob.field) if at is not None else None
    return knob.field, None if default is None else float(default)


@dataclasses.dataclass(frozen=True)
class _Sibling:
    """Another quant of the model: its inspection (``path`` a local file, or ``org/name[@rev]:FILE`` on the Hub) and,
    for a Hub quant the engines' own Hub forms can fetch (llama.cpp's ``-hf``, Ollama's ``hf.co/``: the default
    branch), its repo, its first file and the quant tag that names it alone there (None when the tag names several
    models)."""

    inspection: Inspection
    hub_repo: str | None = None
    hub_file: str | None = None
    hub_tag: str | None = None


class _Once:
    """An iterator's items, produced once and kept: every verdict walks the same siblings, and one that stops early
    (its first whole fit) leaves the rest unread until a later verdict needs them."""

    def __init__(self, source: Iterator[_Sibling]) -> None:
        self._source: Iterator[_Sibling] | None = source
        self._seen: list[_Sibling] = []

    def __iter__(self) -> Iterator[_Sibling]:
        i = 0
        while True:
            if i == len(self._seen):
                item = next(self._source, None) if self._source is not None else None
                if item is None:
                    self._source = None
                    return
                self._seen.append(item)
            yield self._seen[i]
            i += 1


def _smaller_siblings(inspection: Inspection, request: CheckRequest) -> Iterator[_Sibling]:
    """The other GGUF quants of the same model beside it (same architecture, layers and parameter count), smaller
    than it, largest first: in its directory, or in its Hub repo for a Hub model. Read lazily (a caller that stops at
    the first one that fits reads no more), at most ``MAX_SIBLINGS`` models' headers; a sibling that cannot be read
    is not one."""
    from qcheck.hub.select import is_projector
    from qcheck.readers.directory import gguf_groups

    path = inspection.path
    if inspection.container != "gguf":
        return
    if not os.path.isfile(path):
        if inspection.revision is not None:  # read from the Hub: its repo's other quants
            yield from _hub_siblings(inspection, request)
        return
    folder = os.path.dirname(os.path.abspath(path))
    try:
        names = [n for n in os.listdir(folder) if n.lower().endswith(".gguf") and not is_projector(n)]
    except OSError:
        return
    own = os.path.basename(path)
    sized = []
    for members in gguf_groups(names).values():
        if own in members:
            continue
        try:
            size = sum(os.stat(os.path.join(folder, n)).st_size for n in members)
        except OSError:
            continue
        if size < (inspection.size_bytes or 0):
            sized.append((size, os.path.join(os.path.dirname(path), members[0])))
    for _, sibling in sorted(sized, reverse=True)[:MAX_SIBLINGS]:
        other = _read_sibling(inspection, functools.partial(_first, sibling, request))
        if other is not None:
            yield _Sibling(other)


def _first(target: str, request: CheckRequest) -> Inspection:
    from qcheck.check import load_targets

    return load_targets(target, request.limits)[0]


def _read_sibling(inspection: Inspection, read: Callable[[], Inspection]) -> Inspection | None:
    """The quant ``read`` gives when it is the same model as ``inspection``; None when it is another model or cannot
    be read (a bad or hostile header, a failed request, a pickle): a sibling that cannot be read is not an option."""
    from qcheck.errors import QcheckError

    try:
        other = read()
    except (QcheckError, OSError, ValueError, MemoryError):
        return None
    return other if other.container == "gguf" and _same_model(inspection, other) else None


def _hub_siblings(inspection: Inspection, request: CheckRequest) -> Iterator[_Sibling]:
    """The other GGUF quants of a Hub model in its repo at the revision asked: one listing (its sizes pick the
    smaller ones), then the headers of at most ``MAX_SIBLINGS`` of them from that listing's commit, largest first;
    none when the repo cannot be listed. Each request is tried once: the option is optional, so a failure costs no
    wait and prints nothing."""
    from qcheck.errors import QcheckError
    from qcheck.hub import hub_target, open_repo
    from qcheck.hub.select import gguf_choices
    from qcheck.hub.target import HubTarget

    try:
        target = hub_target(inspection.path)
        if target is None or target.revision == "*":
            return
        fs = open_repo(target, request.limits, retries=0)  # optional: one attempt, no wait, no retry notice
        entries = fs.all_files() if hasattr(fs, "all_files") else fs.list()
    except (QcheckError, OSError, ValueError, MemoryError):
        return
    choices = gguf_choices({e.name: e.size for e in entries})
    smaller = [c for c in choices if c.size is not None and c.size < (inspection.size_bytes or 0)]
    for choice in sorted(smaller, key=lambda c: c.size or 0, reverse=True)[:MAX_SIBLINGS]:
        # named as `qcheck check` names it (and reads it back: the same files, the same answer)
        path = HubTarget(target.repo_id, target.revision, choice.first).display()
        other = _read_sibling(inspection, functools.partial(_from_repo, fs, choice, path, request))
        if other is not None and target.revision in _DEFAULT_BRANCH:
            yield _Sibling(other, target.repo_id, choice.first, _hub_tag(target.repo_id, choices, choice))
        elif other is not None:
            yield _Sibling(other)


def _from_repo(fs: FileSet, choice: GgufChoice, path: str, request: CheckRequest) -> Inspection:
    from qcheck.classify import classify
    from qcheck.readers import load_from_fileset

    return classify(load_from_fileset(fs, list(choice.names), request.limits, path=path, origin="hub"))


#: the revisions llama.cpp's -hf and Ollama's hf.co/ fetch (neither takes one: llama.cpp lists the repo at its
#: ``main`` branch, common/hf-cache.cpp ``get_repo_commit``): a quant asked at another is named as qcheck names it
_DEFAULT_BRANCH = (None, "main")


def _hub_tag(repo: str, choices: list[GgufChoice], choice: GgufChoice) -> str | None:
    """The quant label (``Q3_K_M``) when it names ``choice`` alone in the repo, both as qcheck reads ``org/name:TAG``
    back (``qcheck.hub.select.select_gguf``) and as llama.cpp picks a file for it (common/download.cpp
    ``find_best_model``: the first model file, in listing order, whose path holds the tag followed by '.' or '-',
    any case; ggml-org/llama.cpp@0216dab)."""
    from qcheck.hub.select import quant_label, select_gguf

    label = quant_label(choice.first)
    if not label or select_gguf(choices, label, repo) != [choice]:
        return None
    tag = re.compile(re.escape(label) + "[.-]", re.IGNORECASE)
    if [c for c in choices if tag.search(c.first)] != [choice]:
        return None  # llama.cpp would match another model's file too (Q4_K_M in UD-Q4_K_M): name the file instead
    return label


#: engines that take a Hub quant as a model name ``hf.co/org/name:TAG``, TAG a quant or a top-level file name
#: (Ollama: huggingface/hub-docs docs/hub/ollama.md "ollama run hf.co/{username}/{repository}:{quantization}", "you can
#: also directly use the full filename as a tag"; read back by qcheck.deploy.cmdline). Not a split set: the Hub
#: answers Ollama "The specified tag is a sharded GGUF. Ollama does not support this yet" (ollama/ollama#5245, open).
_HF_CO_MODEL = ("ollama",)
#: the model names Ollama takes (ollama/ollama types/model/name.go ``Name.IsValid``: a namespace of 2-80 of
#: [A-Za-z0-9_-], a model of 2-80 of [A-Za-z0-9._-], a tag of 1-80 of [A-Za-z0-9._-], each starting alphanumeric;
#: so no file in a sub-folder, no dotted namespace)
_OLLAMA_NAME = re.compile(r"hf\.co/[A-Za-z0-9][A-Za-z0-9_-]{1,79}/[A-Za-z0-9][A-Za-z0-9._-]{1,79}:"
                          r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")


def _model_words(engine: str, sibling: _Sibling) -> tuple[list[str], list[str]]:
    """The words that name the sibling to the engine, and as shown (a local file by its base name): a file's path
    (llama.cpp ``-m FILE``), else a Hub quant in the engine's own Hub form: llama.cpp ``-hf org/name:Q3_K_M`` (or
    ``-hf org/name -hff FILE`` when the tag names several models), Ollama ``hf.co/org/name:Q3_K_M`` (or
    ``hf.co/org/name:FILE``); none for an engine without one, a form that cannot name it, or a revision they cannot
    fetch (the option then names it as qcheck does, ``org/name[@rev]:FILE``)."""
    path = sibling.inspection.path
    if sibling.hub_repo is None or sibling.hub_file is None:
        flags = _words(engine, "model", path) if os.path.isfile(path) else []
        return flags, [os.path.basename(w) if w == path else w for w in flags]
    if engine in _HF_CO_MODEL:
        name = f"hf.co/{sibling.hub_repo}:{sibling.hub_tag or sibling.hub_file}"
        if (sibling.inspection.gguf_split_count or 1) > 1 or not _OLLAMA_NAME.fullmatch(name):
            return [], []
        flags = _words(engine, "model", name)
        return flags, flags
    if sibling.hub_tag is not None:
        flags = _words(engine, "hf_repo", f"{sibling.hub_repo}:{sibling.hub_tag}")
        return flags, flags
    repo_words, file_words = _words(engine, "hf_repo", sibling.hub_repo), _words(engine, "hf_file", sibling.hub_file)
    flags = repo_words + file_words if repo_words and file_words else []
    return flags, flags


def _display_name(path: str) -> str:
    return path if not os.path.isfile(path) else os.path.basename(path)


def _same_model(a: Inspection, b: Inspection) -> bool:
    """Another quant of the same model: the same architecture, layers and parameter count (within 1%)."""
    if a.architecture != b.architecture or a.num_layers != b.num_layers or not a.parameters or not b.parameters:
        return False
    return abs(a.parameters - b.parameters) <= 0.01 * a.parameters


def _quant_name(ins: Inspection) -> str:
    from qcheck.hub.select import quant_label

    return quant_label(os.path.basename(ins.path)) or ins.quantization.gguf_file_type or ins.quantization.method


def _split_words(engine: str, plan: OffloadPlan) -> str:
    """The layers on the GPU in the engine's words: llama.cpp's '-ngl 24 of 33' or '--n-cpu-moe 12'; an engine that
    picks the split itself (Ollama's scheduler sets num_gpu) '26 of 33 layers on the GPU'."""
    layers = f"{plan.ngl} of {plan.n_layers + 1}"
    if plan.n_cpu_moe:
        moe = _words(engine, "knobs.n_cpu_moe", plan.n_cpu_moe)
        return " ".join(moe) if moe else f"the experts of {plan.n_cpu_moe} layers in RAM"
    spelled = _words(engine, "knobs.n_gpu_layers", plan.ngl)
    if spelled and spelled[0].startswith("-"):
        return f"{spelled[0]} {layers}"
    return f"{layers} layers on the GPU"


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / GIB:.1f}"


def _option(kind: str, label: str, flags: list[str], settings: dict[str, object], v: Verdict, gpus: int
            ) -> DeploymentOption:
    """The option's record from its judged verdict: status, start-up, where the bytes are, the speed."""
    m = v.memory
    assert m is not None
    plan = m.offload
    in_ram = plan is not None and (plan.user_set or m.fits is False) and plan.ngl < plan.n_layers + 1
    split = _split_words(v.engine, plan) if in_ram and plan is not None else None
    gpu_bytes = plan.gpu_bytes if in_ram and plan is not None else (m.per_gpu_bytes if m.tp else m.total_bytes)
    ram = plan.ram_bytes if in_ram and plan is not None else m.host_bytes
    speed = m.speed
    startup = v.startup
    # the context the engine serves: lowered when it lowers it (SGLang's pool cap, llama.cpp --fit)
    context = startup.context if startup is not None and startup.context else m.context
    opt = DeploymentOption(
        kind, label, flags, settings, v.status, startup.outcome if startup is not None else None, m.fits,
        context, gpus, gpu_bytes, ram, split, m.max_context_asked_gpus,
        speed.decode_tokens_per_s if speed is not None else None,
        speed.prefill_tokens_per_s if speed is not None else None)
    opt.summary = f"{label}: {outcome_words(opt)}" + (f"; {decode_words(opt)}" if decode_words(opt) else "")
    return opt


def decode_words(opt: DeploymentOption) -> str:
    """'decode <= 52 tok/s at 32768' (none for a deployment that does not start)."""
    if not opt.decode_tokens_per_s or opt.startup == "does-not-start":
        return ""
    return f"decode <= {opt.decode_tokens_per_s:,.0f} tok/s at {opt.context}"


def outcome_words(opt: DeploymentOption) -> str:
    """What the option's deployment does: 'starts, all on the GPU (5.9 GiB)', 'starts with -ngl 24 of 33 (2.5 GiB
    in RAM)', 'does not start'; with the largest context it holds whole when that is not the one it runs at."""
    each = " each" if opt.gpus > 1 else ""
    where = "the GPU" if opt.gpus == 1 else f"{opt.gpus} GPUs"
    text = {"starts": f"starts, all on {where} ({_gib(opt.gpu_bytes)} GiB{each})",
            "context-lowered": f"starts with the context lowered to {opt.context}",
            "offloaded": f"starts with {opt.offload or 'layers in RAM'} ({_gib(opt.ram_bytes)} GiB in RAM)",
            "does-not-start": "does not start"}.get(opt.startup or "", "start-up unknown")
    if opt.startup is None and opt.fits:
        text = f"fits {where} ({_gib(opt.gpu_bytes)} GiB{each})"
    if opt.max_context and opt.max_context != opt.context:
        text += f"; whole on {where} up to {opt.max_context} tokens"
    elif opt.max_context is None and opt.kind != "more-gpus":
        text += f"; no context fits {where} whole"
    return text
