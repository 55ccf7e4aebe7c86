"""``qcheck probe URL``: what a live OpenAI-compatible endpoint really does, for clients and ``qcheck eval``.

Each capability is ``supported`` (asked and done), ``refused`` (the server said no: its message is kept),
``broken`` (accepted but ignored or wrong: e.g. ``n=2`` answered with one choice, ``json_schema`` answered with
text that does not validate) or ``unknown`` (the probe could not tell, and says why). Requests are few and small
(a handful of tokens each), every answer is read bounded, and the whole probe has one deadline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["CAPABILITIES", "PROBE_SCHEMA", "Capability", "ProbeResult"]

PROBE_SCHEMA = "qcheck.probe/1"
#: capability ids, in report order (``--require`` names them)
CAPABILITIES = ("models", "lora_adapters", "max_context", "logprobs", "top_logprobs", "prompt_logprobs", "n",
                "logit_bias", "stream", "json_object", "json_schema", "tools", "tools_with_schema", "stop")
STATUSES = ("supported", "refused", "broken", "unknown")


@dataclass
class Capability:
    id: str
    status: str
    detail: str = ""
    server_message: str | None = None
    value: int | str | None = None  # how many (top_logprobs), the max context, the adapter count

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "detail": self.detail, "server_message": self.server_message,
                "value": self.value}


@dataclass
class ProbeResult:
    url: str
    model: str | None
    capabilities: list[Capability]
    required: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    adapters: list[str] = field(default_factory=list)
    kind: str = "probe"

    @property
    def missing(self) -> list[str]:
        by_id = {c.id: c for c in self.capabilities}
        return [r for r in self.required if r not in by_id or by_id[r].status != "supported"]

    @property
    def exit_code(self) -> int:
        return 1 if self.missing else 0

    def to_json(self) -> dict[str, Any]:
        return {"schema": PROBE_SCHEMA, "url": self.url, "model": self.model, "models": self.models,
                "adapters": self.adapters, "capabilities": [c.to_json() for c in self.capabilities],
                "required": self.required, "missing": self.missing, "exit_code": self.exit_code}
