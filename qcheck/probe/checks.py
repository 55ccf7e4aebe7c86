"""The probes: one small request per capability against ``/v1/models``, ``/v1/completions`` and
``/v1/chat/completions``, each judged from what came back (not from what was accepted)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from qcheck.probe import Capability, ProbeResult
from qcheck.probe.http import Deadline, ProbeHTTPError, Reply, call, loads

__all__ = ["MAX_CONTEXT", "MAX_TEXT", "run_probe"]

#: the largest context length a server may report and be believed (10M-token models exist; 2^31 is far above)
MAX_CONTEXT = 1 << 31
#: characters of server-controlled text kept in one detail, message, model id or adapter name
MAX_TEXT = 300

_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
           "required": ["city", "population"], "additionalProperties": False}
_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
_ASK = [{"role": "user", "content": "Name one large city and its population as JSON."}]


class _Client:
    def __init__(self, base: str, api_key: str | None, deadline: Deadline, timeout: float):
        self.base, self.api_key, self.deadline, self.timeout = base, api_key, deadline, timeout

    def url(self, path: str) -> str:
        return self.base + path if self.base.endswith("/v1") else self.base + "/v1" + path

    def post(self, path: str, body: dict[str, Any]) -> Reply:
        return call("POST", self.url(path), body, api_key=self.api_key, deadline=self.deadline, timeout=self.timeout)

    def get(self, path: str, *, root: bool = False) -> Reply:
        url = (self.base.removesuffix("/v1") + path) if root else self.url(path)
        return call("GET", url, None, api_key=self.api_key, deadline=self.deadline, timeout=self.timeout)

    def message(self, reply: Reply) -> str:
        from qcheck.eval.runners.http import redact, server_message

        return redact(server_message(reply.body), self.api_key)


def _first(reply: Reply) -> dict[str, Any]:
    data = reply.json()
    choices = data.get("choices") if isinstance(data, dict) else None
    return choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}


def _content(reply: Reply) -> str:
    choice = _first(reply)
    msg = choice.get("message")
    if isinstance(msg, dict) and isinstance(msg.get("content"), str):
        return str(msg["content"])
    return str(choice.get("text") or "")


def _refused(cid: str, client: _Client, reply: Reply) -> Capability | None:
    if 400 <= reply.status < 600:
        return Capability(cid, "refused", f"HTTP {reply.status}", client.message(reply))
    return None


# ------------------------------------------------------------------------------------------ probes
def _chat(client: _Client, model: str, **extra: Any) -> Reply:
    return client.post("/chat/completions", {"model": model, "messages": _ASK, "max_tokens": 24, "temperature": 0,
                                             **extra})


def probe_logprobs(client: _Client, model: str) -> list[Capability]:
    reply = _chat(client, model, logprobs=True, top_logprobs=5, max_tokens=2)
    refused = _refused("logprobs", client, reply)
    if refused:
        return [refused, Capability("top_logprobs", "refused", refused.detail, refused.server_message)]
    content = (_first(reply).get("logprobs") or {}).get("content") if isinstance(_first(reply).get("logprobs"),
                                                                                   dict) else None
    if not isinstance(content, list) or not content:
        return [Capability("logprobs", "broken", "HTTP 200 without choices[0].logprobs.content"),
                Capability("top_logprobs", "broken", "no log-probs came back")]
    top = content[0].get("top_logprobs") if isinstance(content[0], dict) else None
    n = len(top) if isinstance(top, list) else 0
    top_cap = (Capability("top_logprobs", "supported", f"{n} alternatives per token (asked 5)", value=n) if n >= 5
               else Capability("top_logprobs", "broken", f"asked 5 alternatives per token, got {n}", value=n))
    return [Capability("logprobs", "supported", "per-token log-probs on chat completions"), top_cap]


def probe_prompt_logprobs(client: _Client, model: str) -> Capability:
    reply = client.post("/completions", {"model": model, "prompt": "The capital of France is Paris", "max_tokens": 1,
                                         "echo": True, "logprobs": 1, "temperature": 0})
    refused = _refused("prompt_logprobs", client, reply)
    if refused:
        return refused
    lp = _first(reply).get("logprobs")
    tokens = lp.get("token_logprobs") if isinstance(lp, dict) else None
    if isinstance(tokens, list) and len(tokens) >= 3:
        return Capability("prompt_logprobs", "supported", f"echo + logprobs scored {len(tokens)} tokens", value=len(tokens))
    return Capability("prompt_logprobs", "broken", "echo + logprobs accepted, but the prompt tokens came back unscored")


def probe_n(client: _Client, model: str) -> Capability:
    reply = _chat(client, model, n=2, temperature=1.0, max_tokens=4)
    refused = _refused("n", client, reply)
    if refused:
        return refused
    data = reply.json()
    count = len(data.get("choices") or []) if isinstance(data, dict) else 0
    if count == 2:
        return Capability("n", "supported", "n=2 gave 2 choices", value=2)
    return Capability("n", "broken", f"n=2 accepted, {count} choice(s) came back", value=count)


def _token_ids(client: _Client, model: str, text: str) -> list[int] | None:
    """The token ids of ``text`` from the server's tokenizer (vLLM and llama.cpp ``/tokenize``, llama-cpp-python
    ``/extras/tokenize``), or None when it has none."""
    for path in ("/tokenize", "/extras/tokenize"):
        try:
            reply = call("POST", client.base.removesuffix("/v1") + path,
                         {"model": model, "prompt": text, "input": text, "content": text},
                         api_key=client.api_key, deadline=client.deadline, timeout=client.timeout)
        except ProbeHTTPError:
            continue
        data = reply.json()
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if reply.status == 200 and isinstance(tokens, list) and tokens and all(isinstance(t, int) for t in tokens):
            return [int(t) for t in tokens[:64]]
    return None


def probe_logit_bias(client: _Client, model: str) -> Capability:
    """A -100 bias on every token of the greedy answer must change the answer (biasing all of them, not just the
    first, keeps a re-tokenisation that differs from the generated tokens from looking like an ignored bias)."""
    first = _content(_chat(client, model, max_tokens=8))
    tokens = _token_ids(client, model, first) if first else None
    if not tokens:
        reply = _chat(client, model, max_tokens=1, logit_bias={"0": -100})
        refused = _refused("logit_bias", client, reply)
        return refused or Capability("logit_bias", "unknown", "accepted; no tokenize endpoint (or an empty greedy "
                                                              "answer) to see the bias act")
    reply = _chat(client, model, max_tokens=8, logit_bias={str(t): -100 for t in dict.fromkeys(tokens)})
    refused = _refused("logit_bias", client, reply)
    if refused:
        return refused
    if _content(reply) == first:
        return Capability("logit_bias", "broken", f"a -100 bias on the {len(set(tokens))} tokens of the greedy answer "
                                                  f"{first[:30]!r} did not change it")
    return Capability("logit_bias", "supported", f"a -100 bias on the greedy answer's {len(set(tokens))} tokens "
                                                 "changed the answer")


def probe_stream(client: _Client, model: str) -> Capability:
    reply = _chat(client, model, stream=True, max_tokens=4)
    refused = _refused("stream", client, reply)
    if refused:
        return refused
    events = [line[5:].strip() for line in reply.body.decode("utf-8", "replace").splitlines()
              if line.startswith("data:")]
    chunks = [e for e in events if e and e != "[DONE]"]
    if chunks and all(_is_json(c) for c in chunks):
        return Capability("stream", "supported", f"{len(chunks)} server-sent events" +
                          (", ended with [DONE]" if "[DONE]" in events else ", no [DONE]"), value=len(chunks))
    return Capability("stream", "broken", "stream=true accepted, but no server-sent events came back")


def _is_json(text: str) -> bool:
    try:
        loads(text)
    except ValueError:
        return False
    return True


def probe_json_object(client: _Client, model: str) -> Capability:
    reply = _chat(client, model, response_format={"type": "json_object"}, max_tokens=48)
    refused = _refused("json_object", client, reply)
    if refused:
        return refused
    text = _content(reply)
    try:
        value = loads(text)
    except ValueError:
        return Capability("json_object", "broken", f"the answer is not JSON: {text[:80]!r}")
    if not isinstance(value, dict):
        return Capability("json_object", "broken", f"the answer is JSON but not an object: {text[:80]!r}")
    return Capability("json_object", "supported", "the answer parsed as a JSON object")


def _schema_errors(text: str) -> str | None:
    import jsonschema

    try:
        value = loads(text)
    except ValueError:
        return f"not JSON: {text[:80]!r}"
    errors = list(jsonschema.Draft202012Validator(_SCHEMA).iter_errors(value))
    return "; ".join(e.message for e in errors[:3]) if errors else None


def probe_json_schema(client: _Client, model: str) -> Capability:
    fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": _SCHEMA, "strict": True}}
    reply = _chat(client, model, response_format=fmt, max_tokens=64)
    refused = _refused("json_schema", client, reply)
    if refused:
        return refused
    problem = _schema_errors(_content(reply))
    if problem:
        return Capability("json_schema", "broken", f"the answer does not validate against the schema: {problem}")
    return Capability("json_schema", "supported", "the answer validated against the schema (jsonschema)")


def _tool_call(reply: Reply) -> dict[str, Any] | None:
    msg = _first(reply).get("message")
    calls = msg.get("tool_calls") if isinstance(msg, dict) else None
    if isinstance(calls, list) and calls and isinstance(calls[0], dict):
        fn = calls[0].get("function")
        return fn if isinstance(fn, dict) else None
    return None


def probe_tools(client: _Client, model: str) -> Capability:
    choice = {"type": "function", "function": {"name": "get_weather"}}
    reply = _chat(client, model, tools=[_TOOL], tool_choice=choice, max_tokens=48)
    refused = _refused("tools", client, reply)
    if refused:
        return refused
    fn = _tool_call(reply)
    if fn is None:
        return Capability("tools", "broken", "a named tool_choice was accepted, but no tool call came back")
    try:
        args = loads(str(fn.get("arguments") or ""))
    except ValueError:
        return Capability("tools", "broken", "the tool call's arguments are not JSON")
    ok = fn.get("name") == "get_weather" and isinstance(args, dict)
    return Capability("tools", "supported" if ok else "broken",
                      "a get_weather call with JSON arguments" if ok else f"unexpected tool call {fn.get('name')!r}")


def probe_tools_with_schema(client: _Client, model: str) -> Capability:
    fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": _SCHEMA, "strict": True}}
    reply = _chat(client, model, tools=[_TOOL], tool_choice="auto", response_format=fmt, max_tokens=64)
    refused = _refused("tools_with_schema", client, reply)
    if refused:
        return refused
    if _tool_call(reply) is not None:
        return Capability("tools_with_schema", "supported", "tools and a response schema in one request: a tool call")
    problem = _schema_errors(_content(reply))
    if problem:
        return Capability("tools_with_schema", "broken", f"accepted, but the answer neither calls a tool nor "
                                                         f"validates: {problem}")
    return Capability("tools_with_schema", "supported", "tools and a response schema in one request: valid JSON")


def probe_stop(client: _Client, model: str) -> Capability:
    """Stop at a letter or digit the greedy answer has after its first character: the answer must end before it."""
    base = _content(_chat(client, model, max_tokens=16))
    at = next((i for i, ch in enumerate(base) if i >= 1 and ch.isascii() and ch.isalnum()), None)
    if at is None:
        return Capability("stop", "unknown", f"the greedy answer {base[:40]!r} has no letter or digit to stop at")
    word = base[at]
    reply = _chat(client, model, max_tokens=16, stop=[word])
    refused = _refused("stop", client, reply)
    if refused:
        return refused
    text = _content(reply)
    if word in text:
        return Capability("stop", "broken", f"stop={[word]!r} accepted, and the answer {text[:40]!r} still contains it")
    return Capability("stop", "supported", f"generation stopped before {word!r}")


# ------------------------------------------------------------------------------------------ models
def probe_models(client: _Client, result: ProbeResult, wanted: str | None) -> str | None:
    """``/v1/models``: the ids, LoRA adapters among them (vLLM marks an adapter with its base as ``parent``), the
    context a server reports (vLLM ``max_model_len``; llama.cpp ``/props`` ``n_ctx``)."""
    reply = client.get("/models")
    refused = _refused("models", client, reply)
    data = reply.json()
    entries = data.get("data") if isinstance(data, dict) else None
    if refused or not isinstance(entries, list):
        result.capabilities.append(refused or Capability("models", "broken", "/v1/models has no data list"))
        return wanted
    entries = [e for e in entries[:1000] if isinstance(e, dict) and isinstance(e.get("id"), str)]
    result.models = [str(e["id"]) for e in entries]
    result.adapters = [str(e["id"]) for e in entries if e.get("parent") not in (None, e.get("id"))]
    result.capabilities.append(Capability("models", "supported", f"{len(entries)} listed", value=len(entries)))
    result.capabilities.append(Capability(
        "lora_adapters", "supported" if result.adapters else "unknown",
        f"{len(result.adapters)} adapter(s): {', '.join(result.adapters[:10])}" if result.adapters
        else "no listed model names a parent base model", value=len(result.adapters)))
    model = wanted or (result.models[0] if result.models else None)
    _max_context(client, entries, model, result)
    return model


def _max_context(client: _Client, entries: list[dict[str, Any]], model: str | None, result: ProbeResult) -> None:
    for e in entries:
        if e.get("id") == model and "max_model_len" in e:
            result.capabilities.append(_context("max_model_len in /v1/models", e["max_model_len"]))
            return
    try:
        props = client.get("/props", root=True)
    except ProbeHTTPError:
        props = Reply(0, b"")
    data = props.json()
    settings = data.get("default_generation_settings") if isinstance(data, dict) else None
    if isinstance(settings, dict) and "n_ctx" in settings:
        result.capabilities.append(_context("n_ctx in /props", settings["n_ctx"]))
        return
    result.capabilities.append(Capability("max_context", "unknown", "the server reports no context length "
                                                                   "(/v1/models max_model_len, /props n_ctx)"))


def _context(where: str, raw: object) -> Capability:
    """The context length a server reports: a whole number of tokens up to ``MAX_CONTEXT``, else ``broken``."""
    from qcheck.typed import pos_int

    n = pos_int(raw, MAX_CONTEXT) if isinstance(raw, int) else None
    if n is None:
        shown = f"an integer of {len(str(raw))} digits" if isinstance(raw, int) and len(str(raw)) > 20 else \
            repr(raw)[:40]
        return Capability("max_context", "broken", f"{where} is {shown}, not a context length (1 to {MAX_CONTEXT})")
    return Capability("max_context", "supported", f"{n} tokens ({where})", value=n)


def _shown(text: str, api_key: str | None) -> str:
    """Server-controlled text as the report may show it: the API key and every URL's userinfo masked, at most
    ``MAX_TEXT`` characters."""
    from qcheck.report.sanitize import mask

    text = mask(text, api_key)
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT - 3] + "..."


def _finish(result: ProbeResult, api_key: str | None) -> ProbeResult:
    """The result as reported: every string the server chose (ids, adapter names, details, its messages) masked
    and bounded."""
    result.url = _shown(result.url, api_key)
    result.model = _shown(result.model, api_key) if result.model is not None else None
    result.models = [_shown(m, api_key) for m in result.models]
    result.adapters = [_shown(a, api_key) for a in result.adapters]
    for c in result.capabilities:
        c.detail = _shown(c.detail, api_key)
        c.server_message = _shown(c.server_message, api_key) if c.server_message is not None else None
        if isinstance(c.value, str):
            c.value = _shown(c.value, api_key)
    return result


def _guard(cid: str, probe: Callable[[], Capability | list[Capability]]) -> list[Capability]:
    try:
        got = probe()
    except ProbeHTTPError as exc:
        return [Capability(cid, "unknown", f"no answer: {exc}")]
    return got if isinstance(got, list) else [got]


def run_probe(base: str, *, model: str | None, api_key: str | None, deadline: Deadline, timeout: float,
              required: list[str]) -> ProbeResult:
    """Every probe, in report order; a probe whose request got no answer is ``unknown`` with why."""
    client = _Client(base, api_key, deadline, timeout)
    result = ProbeResult(base, model, [], required=required)
    model = probe_models(client, result, model)
    result.model = model
    if model is None:
        return _finish(result, api_key)
    probes: list[tuple[str, Callable[[], Capability | list[Capability]]]] = [
        ("logprobs", lambda: probe_logprobs(client, model)),
        ("prompt_logprobs", lambda: probe_prompt_logprobs(client, model)),
        ("n", lambda: probe_n(client, model)), ("logit_bias", lambda: probe_logit_bias(client, model)),
        ("stream", lambda: probe_stream(client, model)), ("json_object", lambda: probe_json_object(client, model)),
        ("json_schema", lambda: probe_json_schema(client, model)), ("tools", lambda: probe_tools(client, model)),
        ("tools_with_schema", lambda: probe_tools_with_schema(client, model)), ("stop", lambda: probe_stop(client, model)),
    ]
    for cid, probe in probes:
        caps = _guard(cid, probe)
        if cid == "logprobs" and len(caps) == 1:
            caps.append(Capability("top_logprobs", caps[0].status, caps[0].detail))
        result.capabilities.extend(caps)
    return _finish(result, api_key)
