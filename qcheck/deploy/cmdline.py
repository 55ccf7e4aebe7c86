"""An engine command line -> the ``CheckRequest`` it deploys (``qcheck check --gpu G -- ENGINE-COMMAND...``).

The program names the engine (``vllm serve``, ``python -m vllm.entrypoints.openai.api_server``, ``python -m
sglang.launch_server``, ``sglang serve``, ``llama-server``, ``llama-cli``, ``ollama run``, ``ollama create -f
Modelfile``, ``trtllm-serve``, ``mlx_lm.server``, ``lms load``); its arguments are read with the engine's own
option table (``qcheck.deploy.flags``, ``qcheck.deploy.argv``) and each option's meaning
(``qcheck.deploy.meanings``). Leading ``NAME=VALUE`` words are the environment the engine reads
(``LLAMA_ARG_CTX_SIZE``, ``OLLAMA_CONTEXT_LENGTH``). What the engine would refuse becomes a ``CommandFinding``
(judged by the ``command-line`` dimension); every option qcheck does not model is kept as "not judged".
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from qcheck.deploy.argv import Occurrence, read_argv, secret_option
from qcheck.deploy.flags import FlagSpec, FlagTable, flag_table
from qcheck.deploy.meanings import MEANINGS, Refused
from qcheck.deploy.paths import PathRule, confine_path, is_local
from qcheck.errors import UsageError
from qcheck.report.sanitize import MASK, mask, secret_name
from qcheck.request import CommandFinding, Deploy, EngineKnobs, KVCacheTypes, Origin, Parallel, SettingRead

__all__ = ["PROGRAMS", "EngineCommand", "parse_command"]

#: a leading ``NAME=VALUE`` word (names as a shell, compose or Kubernetes writes them: ``.`` and ``-`` included)
_ENV_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*=")
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")

#: the programs understood, for the usage error
PROGRAMS = ("vllm serve MODEL", "python -m vllm.entrypoints.openai.api_server --model MODEL",
            "python -m sglang.launch_server --model-path MODEL", "sglang serve MODEL", "llama-server -m FILE",
            "llama-cli -m FILE", "ollama run MODEL", "ollama create NAME -f Modelfile", "trtllm-serve MODEL",
            "mlx_lm.server --model MODEL", "lms load MODEL")

#: options naming a file of further settings (vLLM and SGLang ``--config`` YAML, trtllm-serve's
#: ``--extra_llm_api_options``): qcheck does not read it, so what it sets is unknown, not assumed default
_SETTINGS_FILES = {"vllm": "config", "sglang": "config", "trtllm-serve": "extra_llm_api_options"}

#: environment variables vLLM and SGLang read at start-up that change whether they start: a context above the
#: model's maximum is allowed (vllm/envs.py VLLM_ALLOW_LONG_MAX_MODEL_LEN at 0.11.0 and 0.34.0; sglang/srt/environ.py
#: SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN at 0.5.23); qcheck.memory.startup reads the knob
_START_ENV = {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "vllm", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "sglang"}

#: Ollama's server environment (envconfig/config.go:215-336 at v0.33.0-rc2) -> what it sets
_OLLAMA_ENV = {"OLLAMA_CONTEXT_LENGTH": "context", "OLLAMA_NUM_PARALLEL": "knobs.n_parallel",
               "OLLAMA_FLASH_ATTENTION": "knobs.flash_attn", "OLLAMA_KV_CACHE_TYPE": "kv"}


@dataclass(frozen=True)
class _Program:
    table: str  # flag table name
    label: str
    llama_program: str | None = None  # llama.cpp: which tool's options (server, cli)
    inserted: int = 0  # words qcheck put before the arguments (sglang serve MODEL -> --model-path MODEL)


@dataclass
class EngineCommand:
    """What a command line deploys: the engine, the model as written, the Deploy, and what was read."""

    engine: str
    program: str
    model: str | None
    deploy: Deploy
    origin: Origin
    notes: list[str] = field(default_factory=list)
    #: where a local model path may lead (a manifest's command: inside the policy's repository); None: anywhere
    paths: PathRule | None = None

    def target(self) -> str | None:
        """The model as a qcheck target (Hub id, ``repo:QUANT``, a path), or None when the command names a model
        qcheck cannot read (an Ollama library name): the user gives PATH then. A local path that leaves the
        confinement (``paths``) is an InputError, worded the same whether or not the path exists."""
        if self.model is not None and self.paths is not None and is_local(self.model):
            confine_path(self.paths, self.model, "the model the engine command names", walk=True,
                         hint="map the container path to a model in the repository under the deployment's models")
        return self.model

    def to_json(self) -> dict[str, object]:
        return {"engine": self.engine, "program": self.program, "model": self.model, "deploy": self.deploy.to_json(),
                "origin": self.origin.to_json()}


# ------------------------------------------------------------------------------------------ programs
def _detect(words: list[str]) -> tuple[_Program, list[str]]:
    """The program and the arguments after it (sub-command removed)."""
    if not words:
        raise UsageError("no engine command after --; give one of: " + "; ".join(PROGRAMS))
    head = os.path.basename(words[0])
    rest = words[1:]
    if _PYTHON.match(head) and len(rest) >= 2 and rest[0] == "-m":
        module, rest = rest[1], rest[2:]
        by_module = {"vllm.entrypoints.openai.api_server": _Program("vllm", "python -m vllm.entrypoints.openai."
                                                                             "api_server"),
                     "sglang.launch_server": _Program("sglang", "python -m sglang.launch_server"),
                     "mlx_lm.server": _Program("mlx", "python -m mlx_lm.server")}
        if module in by_module:
            return by_module[module], rest
        if module == "mlx_lm" and rest[:1] == ["server"]:
            return _Program("mlx", "python -m mlx_lm server"), rest[1:]
        raise UsageError(f"python -m {mask(module)}: not an engine qcheck reads; give one of: " + "; ".join(PROGRAMS))
    sub = rest[0] if rest else ""
    two = {("vllm", "serve"): _Program("vllm", "vllm serve"), ("sglang", "serve"): _Program("sglang", "sglang serve"),
           ("ollama", "run"): _Program("ollama-run", "ollama run"),
           ("ollama", "create"): _Program("ollama-create", "ollama create"),
           ("ollama", "serve"): _Program("ollama-run", "ollama serve"),
           ("lms", "load"): _Program("lms-load", "lms load"), ("mlx_lm", "server"): _Program("mlx", "mlx_lm server"),
           ("trtllm-serve", "serve"): _Program("trtllm-serve", "trtllm-serve serve")}
    if (head, sub) in two:
        args = rest[1:]
        if (head, sub) == ("sglang", "serve") and args and not args[0].startswith("-"):
            # sglang/cli/serve.py _normalize_positional_model_path
            return _Program("sglang", "sglang serve", inserted=1), ["--model-path", *args]
        return two[(head, sub)], args
    one = {"llama-server": _Program("llama.cpp", "llama-server", "server"),
           "llama-cli": _Program("llama.cpp", "llama-cli", "cli"),
           "trtllm-serve": _Program("trtllm-serve", "trtllm-serve"), "mlx_lm.server": _Program("mlx", "mlx_lm.server")}
    if head in one:
        return one[head], rest
    raise UsageError(f"{' '.join(map(_word_shown, words[:2]))}: not an engine command qcheck reads; give one of: "
                     + "; ".join(PROGRAMS))


def _word_shown(word: str) -> str:
    """A word as a message may quote it: ``NAME=***`` when the name says it holds a secret, URL userinfo masked."""
    name, eq, _value = word.partition("=")
    return f"{name}={MASK}" if eq and secret_name(name) else mask(word)


# ------------------------------------------------------------------------------------------ building
class SettingsBuilder:
    """Collects what the options set (the last occurrence wins, as in every one of these parsers)."""

    def __init__(self, table: FlagTable, table_name: str):
        self.table, self.table_name = table, table_name
        self.values: dict[str, object] = {}
        self.settings: list[SettingRead] = []
        self.findings: list[CommandFinding] = []
        #: secret values read so far (masked wherever they are quoted)
        self.secrets: list[str] = []
        #: where local paths (a Modelfile, its FROM) may lead; None: anywhere
        self.paths: PathRule | None = None

    def scrub(self, text: str) -> str:
        """``text`` as it may be shown: every secret read so far and every URL's userinfo masked."""
        return mask(text, *self.secrets, keylike=False)

    def refuse(self, flag: str, value: str | None, message: str, *, unknown_flag: bool = False,
               status: str = "unsupported") -> None:
        self.findings.append(CommandFinding(self.table.engine, status, self.scrub(flag),
                                            None if value is None else self.scrub(value), self.scrub(message),
                                            self.table.source, self.table.version, unknown_flag=unknown_flag))

    def note(self, flag: str, value: str | None, where: str, judged_as: str | None) -> None:
        self.settings.append(SettingRead(self.scrub(flag), None if value is None else self.scrub(value), where,
                                         judged_as))

    def apply(self, occ: Occurrence) -> None:
        spec, value = occ.spec, occ.value
        meaning = MEANINGS.get(self.table_name, {}).get(spec.dest)
        if spec.kind == "switch" and occ.negative and meaning is not None:
            self.values[meaning.target] = False
            self.note(occ.written, value, occ.where, meaning.target)
            return
        if not self._choice_ok(occ):
            return
        if meaning is None:
            self.note(occ.written, value, occ.where, None)
            if _SETTINGS_FILES.get(self.table_name) == spec.dest:
                self.refuse(occ.written, value, f"qcheck does not read the settings in {value}; any of them (context, "
                            "KV cache, parallel layout, quantisation) may change the verdict", status="unknown")
            return
        try:
            converted = meaning.convert(value, occ.written.split("=")[0])
        except Refused as exc:
            self.refuse(occ.written, value, str(exc))
            return
        self.values[meaning.target] = converted
        self.note(occ.written, value, occ.where, meaning.target)

    def _choice_ok(self, occ: Occurrence) -> bool:
        spec, value = occ.spec, occ.value
        if not spec.choices or value is None or value in spec.choices:
            return True
        if self.table.syntax == "click":
            listed = ", ".join(repr(c) for c in spec.choices)
            self.refuse(occ.written, value, f"Invalid value for '{spec.names[0]}': {value!r} is not one of {listed}.")
        else:
            listed = ", ".join(repr(c) for c in spec.choices)
            self.refuse(occ.written, value, f"argument {spec.label}: invalid choice: {value!r} (choose from {listed})")
        return False


def _split_env(words: list[str]) -> tuple[dict[str, str], list[str]]:
    env: dict[str, str] = {}
    i = 0
    if words[:1] == ["env"]:
        i = 1
    while i < len(words) and _ENV_WORD.match(words[i]):
        name, _, value = words[i].partition("=")
        env[name] = value
        i += 1
    return env, words[i:]


def _env_secret(name: str, spec: FlagSpec | None = None) -> bool:
    """An environment variable whose value is a secret: its name says so (``OPENAI_KEY``, ``DB_PASSWORD``), or it
    sets a secret option (``LLAMA_API_KEY``)."""
    return secret_name(name) or (spec is not None and secret_option(spec))


def _apply_env(builder: SettingsBuilder, env: dict[str, str], program: _Program) -> None:
    """Environment variables the engine reads as options (llama.cpp ``LLAMA_ARG_*``, Ollama's server settings);
    any other is listed as not judged. The command line overrides the environment (llama.cpp warns so)."""
    for name, value in env.items():
        if _env_secret(name):
            builder.secrets.append(value)
            builder.note(name, MASK, "env", None)
            continue
        if program.table == "llama.cpp":
            spec = builder.table.by_env.get(name) or builder.table.by_env.get(name.replace("LLAMA_ARG_NO_", "LLAMA_ARG_"))
            if spec is not None:
                builder.apply(_env_occurrence(name, value, spec))
                continue
        if program.table.startswith("ollama") and name in _OLLAMA_ENV:
            _ollama_env(builder, name, value)
            continue
        if _START_ENV.get(name) == builder.table.engine:
            word = value.strip().lower()  # vLLM: value.lower() in ("1", "true"); SGLang EnvBool: also yes, y
            on = word in ("1", "true") or (builder.table.engine == "sglang" and word in ("yes", "y"))
            builder.values["knobs.allow_long_context"] = on
            builder.note(name, value, "env", "knobs.allow_long_context")
            continue
        builder.note(name, mask(value), "env", None)


def _env_occurrence(name: str, value: str, spec: FlagSpec) -> Occurrence:
    """llama.cpp ``get_value_from_env``: a switch is on when truthy; ``LLAMA_ARG_NO_X`` turns it off."""
    if spec.kind == "switch":
        on = value.strip().lower() in ("1", "true", "on", "enabled") and "LLAMA_ARG_NO_" not in name
        return Occurrence(name, spec, None, negative=not on, where="env")
    return Occurrence(name, spec, MASK if secret_option(spec) else value, where="env")


def _ollama_env(builder: SettingsBuilder, name: str, value: str) -> None:
    from qcheck.deploy.meanings import ollama_bool, ollama_uint

    target = _OLLAMA_ENV[name]
    converted: object = value.strip().lower() or None
    if target in ("context", "knobs.n_parallel"):
        converted = ollama_uint(value, name)
    elif target == "knobs.flash_attn":
        converted = ollama_bool(value, name)
    if converted is None:
        builder.note(name, value, "env", None)  # Ollama keeps its default for a value it cannot parse
        return
    builder.values[target] = converted
    builder.note(name, value, "env", target)


def _model_target(values: dict[str, object], program: _Program) -> tuple[str | None, list[str]]:
    """The qcheck target the command's model arguments name, and what was assumed to get it."""
    notes: list[str] = []
    model = values.get("model")
    if program.table == "llama.cpp" and values.get("hf_repo"):
        repo, _, quant = str(values["hf_repo"]).partition(":")
        if values.get("hf_file"):
            return f"{repo}:{values['hf_file']}", notes
        if not quant:
            notes.append("-hf without :QUANT: llama.cpp picks Q4_K_M (or the repo's first GGUF when it has none); "
                         "judged as Q4_K_M")
        return f"{repo}:{quant or 'Q4_K_M'}", notes
    if not isinstance(model, str) or not model:
        return None, notes
    if program.table == "ollama-create" and (model.endswith(".gguf") or os.path.isabs(model)
                                             or model.startswith(".") or os.path.isdir(model)):
        return model, notes  # FROM a local file or directory (parser.go: a path is read from disk)
    if program.table.startswith("ollama"):
        m = re.match(r"^(?:https?://)?(?:hf\.co|huggingface\.co)/([^/:]+/[^/:]+)(?::(.+))?$", model)
        if m:
            return f"{m.group(1)}:{m.group(2)}" if m.group(2) else m.group(1), notes
        return None, notes  # an Ollama library name (llama3.2:3b): not a file qcheck can read
    revision = values.get("revision")
    if isinstance(revision, str) and revision and "@" not in model and not os.path.exists(model):
        return f"{model}@{revision}", notes
    return model, notes


def _deploy(values: dict[str, object], findings: list[CommandFinding]) -> Deploy:
    """The Deploy the options set (values already converted by the engine's own rules)."""
    knob_fields = {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith("knobs.") and v is not None}
    tp = values.get("tp")
    ep = values.get("ep")
    if values.get("ep_enabled"):  # vLLM: the expert-parallel group is TP x DP (config/parallel.py)
        ep = int(str(tp or 1)) * int(str(values.get("dp") or 1))
    kv = values.get("kv")
    kv_types = KVCacheTypes.parse(str(kv) if kv is not None else None,
                                  str(values["kv.k"]) if values.get("kv.k") is not None else None,
                                  str(values["kv.v"]) if values.get("kv.v") is not None else None)
    try:
        return Deploy(context=_int_or_none(values.get("context")), kv_cache=kv_types,
                      parallel=Parallel(_int_or_none(tp), _int_or_none(values.get("pp")), _int_or_none(ep)),
                      knobs=EngineKnobs(**knob_fields), findings=tuple(findings))  # type: ignore[arg-type]
    except UsageError as exc:
        raise UsageError(f"engine command: {exc}") from None


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _quantization_finding(builder: SettingsBuilder) -> None:
    """vLLM checks ``--quantization`` after parsing (ModelConfig._verify_quantization, vllm/config/model.py
    :1403-1490 at 0.34.0): an unknown method is refused; any method replaces what vLLM detects from the
    checkpoint (and picks another kernel: ``gptq`` skips the Marlin override), which qcheck does not judge."""
    method = builder.values.get("knobs.quantization")
    if not isinstance(method, str):
        return
    known = builder.table.quantization_methods
    if known is not None and method not in known:
        builder.refuse("--quantization", method,
                       f"Unknown quantization method: {method}. Must be one of {list(known)}.")
        builder.values.pop("knobs.quantization")


def parse_command(words: Sequence[str], *, paths: PathRule | None = None) -> EngineCommand:
    """Read an engine command line (a list of words, as after ``--``; one string is split like a shell). ``paths``
    confines the local files the command names (a manifest's: inside the policy's repository)."""
    words = list(words)
    if len(words) == 1 and " " in words[0]:
        words = shlex.split(words[0])
    env, words = _split_env(words)
    program, rest = _detect(words)
    table = flag_table(program.table)
    builder = SettingsBuilder(table, program.table)
    builder.paths = paths
    builder.secrets += [v for k, v in env.items() if _env_secret(k, table.by_env.get(k))]
    parsed = read_argv(table, rest, program.llama_program)
    builder.secrets += parsed.secrets
    _apply_env(builder, env, program)
    positionals = [spec for spec in table.flags if spec.kind == "positional"]
    for spec, value in zip(positionals, parsed.positionals, strict=False):
        builder.apply(Occurrence(f"<{spec.dest}>", spec, value))
    for occ in parsed.occurrences:
        builder.apply(occ)
    for problem in parsed.problems:
        builder.refuse(problem.flag, problem.value, problem.message, unknown_flag=problem.unknown_flag)
    _quantization_finding(builder)
    notes: list[str] = []
    if program.table == "ollama-create":
        from qcheck.deploy.modelfile import apply_modelfile

        notes += apply_modelfile(builder, str(builder.values.get("modelfile") or "Modelfile"))
    model, more = _model_target(builder.values, program)
    notes = [builder.scrub(n) for n in (*notes, *more)]
    deploy = _deploy(builder.values, builder.findings)
    head = words[:len(words) - (len(rest) - program.inserted)]
    origin = Origin("command", table.engine, program.label,
                    builder.scrub(_shown(env, head, parsed.shown[program.inserted:], table)), table.source,
                    tuple(builder.settings))
    return EngineCommand(table.engine, program.label, model, deploy, origin, notes, paths)


def _shown(env: dict[str, str], head: list[str], args: list[str], table: FlagTable) -> str:
    """The command as judged: the environment (a secret's value ``***``), the program and the arguments as the
    reader shows them (every secret option's value masked)."""
    out = [f"{k}={MASK if _env_secret(k, table.by_env.get(k)) else mask(v)}" for k, v in env.items()]
    return shlex.join([*out, *(mask(w, keylike=False) for w in head), *args])
