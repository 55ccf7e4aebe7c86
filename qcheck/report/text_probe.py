"""Human text for ``qcheck probe``: one line per capability, the server's own words for a refusal."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from qcheck.probe import ProbeResult

_WORDS = {"supported": "SUPPORTED", "refused": "REFUSED", "broken": "BROKEN", "unknown": "UNKNOWN"}


def render(result: ProbeResult) -> str:
    lines = [f"{result.url}: model {result.model or '(none listed)'}"]
    for c in result.capabilities:
        mark = "  <- required" if c.id in result.required and c.status != "supported" else ""
        lines.append(f"  {_WORDS.get(c.status, c.status):<10} {c.id:<18} {c.detail}{mark}")
        if c.server_message:
            lines.append(f"  {'':<10} {'':<18} server: {c.server_message}")
    missing = result.missing
    tail = f"missing required: {', '.join(missing)}" if missing else (
        "every required capability is supported" if result.required else "nothing required")
    lines += ["", f"{len(result.capabilities)} capabilities probed; {tail} (exit {result.exit_code})"]
    return "\n".join(lines) + "\n"
