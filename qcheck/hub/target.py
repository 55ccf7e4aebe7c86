"""Parse a Hub target: ``org/name[@revision][:file|:QUANT]``.

Kept free of network code so the CLI can decide "local path or Hub repo?" cheaply. Also accepts the
spellings users paste: ``hf://org/name``, ``hf.co/org/name`` and ``https://huggingface.co/org/name``
(with ``/blob/REV/FILE`` or ``/resolve/REV/FILE`` tails, as copied from the web page).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

from qcheck.errors import UsageError

# huggingface_hub's own rule (utils/_validators.py REPO_ID_REGEX): names of word chars, '-' and '.', at most 96 chars.
_NAME = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?"
_REPO_RE = re.compile(rf"^(?P<repo>{_NAME}/{_NAME})(?:@(?P<rev>[^:\s]+))?(?::(?P<sel>.+))?$")
_URL_PREFIXES = ("https://huggingface.co/", "http://huggingface.co/", "https://hf.co/", "hf.co/", "huggingface.co/",
                 "hf://")
_URL_TAIL_RE = re.compile(r"^(?P<repo>[^/]+/[^/]+)/(?:blob|resolve|tree)/(?P<rev>[^/]+)(?:/(?P<file>.+))?$")


@dataclass(frozen=True)
class HubTarget:
    """A repo on the Hub, an optional revision (branch, tag or commit) and an optional file or quant selector."""

    repo_id: str
    revision: str | None = None
    selector: str | None = None  # a file path inside the repo, or a quant name such as Q4_K_M

    @property
    def is_file(self) -> bool:
        """True when the selector names a file (it has an extension we read) rather than a quant."""
        return bool(self.selector) and self.selector.lower().endswith((".gguf", ".safetensors", ".json"))

    def display(self) -> str:
        text = self.repo_id
        if self.revision:
            text += f"@{self.revision}"
        if self.selector:
            text += f":{self.selector}"
        return text


def _strip_url(text: str) -> str:
    for prefix in _URL_PREFIXES:
        if text.startswith(prefix):
            rest = text[len(prefix):].strip("/")
            m = _URL_TAIL_RE.match(rest)
            if m:
                out = f"{m['repo']}@{unquote(m['rev'])}"
                return f"{out}:{unquote(m['file'])}" if m["file"] else out
            return rest
    return text


def looks_like_repo_id(text: str) -> bool:
    """Whether ``text`` reads as a Hub target (the caller checks first that no such local path exists)."""
    try:
        parse_target(text)
    except UsageError:
        return False
    return True


def parse_target(text: str) -> HubTarget:
    """Split ``org/name[@rev][:file|:QUANT]``; anything else is a UsageError that shows the accepted form."""
    raw = _strip_url(text.strip())
    m = _REPO_RE.match(raw)
    if not m or len(m["repo"]) > 96 or "--" in m["repo"] or ".." in m["repo"]:
        raise UsageError(f"{text!r} is neither a local path nor a Hub repo id (org/name[@revision][:file|:QUANT])")
    selector = m["sel"]
    if selector is not None:
        selector = selector.strip().lstrip("/")
        if not selector or ".." in selector.split("/") or "\\" in selector:
            raise UsageError(f"{text!r}: bad file or quant selector after ':'")
    return HubTarget(repo_id=m["repo"], revision=m["rev"] or None, selector=selector or None)
