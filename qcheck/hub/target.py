"""The one parser of Hub targets: ``org/name[@revision][:file|:QUANT]`` and the links users paste.

Every layer that must tell "a Hub repo" from "a local path" asks here (the readers, the gate's policy and
quality reference, the report locations), so a string is read the same way everywhere. Kept free of network
code and of huggingface_hub so the CLI can decide cheaply.

Rules:

- A repo id follows ``huggingface_hub.utils.validate_repo_id``: ``namespace/name``, ASCII letters, digits,
  ``_``, ``-`` and ``.``; each part starts and ends with a letter, digit or ``_``; the name is at most 96
  characters; no ``--`` or ``..``; no ``.git`` ending. qcheck requires the namespace (a bare ``name`` is a
  local path).
- Links are normalised: ``hf://org/name``, ``hf.co/org/name``, ``huggingface.co/org/name`` and
  ``http(s)://[www.]huggingface.co|hf.co|<HF_ENDPOINT host>/org/name`` with an optional
  ``/blob|resolve|tree/REV[/FILE]`` tail, query string or fragment (as copied from the web page). A link
  that is not a model repo link (a dataset, a Space, another site) is a UsageError with one line.
- A local path wins: the caller checks first that no such file exists. ``./x``, ``/x``, ``~/x``, a
  Windows path and ``org/model.gguf`` without ``@revision`` or ``:file`` are local paths, never repo ids.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from qcheck.errors import UsageError
from qcheck.model import Origin

# huggingface_hub utils/_validators.py REPO_ID_REGEX (ASCII): a part starts and ends with a word character.
_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?"
_REPO_RE = re.compile(rf"^(?P<repo>{_PART}/{_PART})(?:@(?P<rev>[^:\s]+))?(?::(?P<sel>.*))?$", re.ASCII)
_MAX_NAME = 96
_HUB_HOSTS = ("huggingface.co", "www.huggingface.co", "hf.co", "www.hf.co")
_BARE_LINK_PREFIXES = tuple(f"{host}/" for host in _HUB_HOSTS)
#: what the Hub puts between a repo and a revision in its web links
_LINK_KINDS = ("blob", "resolve", "tree")
#: the Hub's other repo types: a link to one of these is not a model
_OTHER_REPO_TYPES = ("datasets", "spaces", "collections", "papers", "docs", "organizations", "settings")
#: names a local file rather than a repo: ``org/model.gguf`` alone is a missing file, not a repo called that
LOCAL_SUFFIXES = (".gguf", ".safetensors", ".bin", ".pt", ".pth", ".json", ".ckpt")
FORM = "org/name[@revision][:file|:QUANT]"


@dataclass(frozen=True)
class HubTarget:
    """A repo on the Hub, an optional revision (branch, tag or commit) and an optional file or quant selector."""

    repo_id: str
    revision: str | None = None
    selector: str | None = None  # a file path inside the repo, or a quant name such as Q4_K_M

    @property
    def is_file(self) -> bool:
        """True when the selector names a file (it has an extension we read) rather than a quant."""
        return bool(self.selector) and str(self.selector).lower().endswith((".gguf", ".safetensors", ".json"))

    def display(self) -> str:
        """The canonical ``org/name[@revision][:selector]`` spelling."""
        text = self.repo_id
        if self.revision:
            text += f"@{self.revision}"
        if self.selector:
            text += f":{self.selector}"
        return text


def repo_id_problem(repo_id: str) -> str | None:
    """Why ``repo_id`` (``namespace/name``) breaks huggingface_hub's rules, or None when it follows them."""
    if repo_id.count("/") != 1:
        return "a repo id is namespace/name"
    if not re.fullmatch(rf"{_PART}/{_PART}", repo_id, re.ASCII):
        return ("a repo id uses letters, digits, '-', '_' and '.', and neither part starts or ends with "
                "'-' or '.'")
    if len(repo_id.split("/")[1]) > _MAX_NAME:
        return f"a repo name is at most {_MAX_NAME} characters"
    if "--" in repo_id or ".." in repo_id:
        return "'--' and '..' are not allowed in a repo id"
    if repo_id.endswith(".git"):
        return "a repo id cannot end in '.git'"
    return None


def is_link(text: str) -> bool:
    """Whether ``text`` is a pasted link (a URL, or a scheme-less hf.co / huggingface.co address)."""
    return "://" in text or text.lower().startswith(_BARE_LINK_PREFIXES)


def _endpoint_host() -> str | None:
    env = os.environ.get("HF_ENDPOINT")
    return urlsplit(env.strip()).hostname if env and "://" in env else None


def _link_to_id(text: str) -> str:
    """``org/name[@rev][:file]`` for a pasted Hub link; a UsageError naming the accepted links otherwise."""
    raw = text if "://" in text else f"https://{text}"
    bad = UsageError(f"{text!r} is not a Hub model link (use https://huggingface.co/org/name[/blob/REV/FILE], "
                     f"hf.co/org/name or {FORM})")
    if raw.lower().startswith("hf://"):
        path = raw[len("hf://"):]
    else:
        try:
            parts = urlsplit(raw)
            host = (parts.hostname or "").lower()
        except ValueError:
            raise bad from None
        if parts.scheme.lower() not in ("http", "https") or host not in (*_HUB_HOSTS, _endpoint_host()):
            raise bad
        path = parts.path
    path = path.split("?", 1)[0].split("#", 1)[0].strip("/")
    segments = [unquote(s) for s in path.split("/")]
    if segments and segments[0] in _OTHER_REPO_TYPES:
        raise UsageError(f"{text!r} is a Hub {segments[0].rstrip('s')} link; qcheck reads model repos "
                         f"(https://huggingface.co/org/name or {FORM})")
    if len(segments) == 2:
        return "/".join(segments)
    if len(segments) >= 4 and segments[2] in _LINK_KINDS:
        out = f"{segments[0]}/{segments[1]}@{segments[3]}"
        return f"{out}:{'/'.join(segments[4:])}" if len(segments) > 4 else out
    raise bad


def parse_target(text: str) -> HubTarget:
    """Split ``org/name[@rev][:file|:QUANT]`` or a pasted Hub link; anything else is a UsageError of one line
    that says why and shows the accepted form."""
    text = text.strip()
    raw = _link_to_id(text) if is_link(text) else text
    m = _REPO_RE.match(raw)
    if not m:
        raise UsageError(f"{text!r} is neither a local path nor a Hub repo id ({FORM})")
    problem = repo_id_problem(m["repo"])
    if problem:
        raise UsageError(f"{text!r} is not a Hub repo id: {problem}")
    selector = m["sel"]
    if selector is not None:
        selector = selector.strip().lstrip("/")
        if not selector or ".." in selector.split("/") or "\\" in selector:
            raise UsageError(f"{text!r}: bad file or quant selector after ':'")
    return HubTarget(repo_id=m["repo"], revision=m["rev"] or None, selector=selector or None)


def hub_target(text: str) -> HubTarget | None:
    """The Hub target ``text`` names, or None when it can only be a local path.

    The caller checks first that no local file or directory of that name exists (a local path always
    wins). A pasted link is always meant for the Hub: one that is not a model repo link is a UsageError.
    """
    text = text.strip()
    if is_link(text):
        return parse_target(text)
    if not text or text.startswith((".", "/", "~")) or "\\" in text or re.match(r"^[A-Za-z]:[\\/]", text):
        return None
    try:
        target = parse_target(text)
    except UsageError:
        return None
    if target.revision is None and target.selector is None and target.repo_id.lower().endswith(LOCAL_SUFFIXES):
        return None
    return target


def looks_like_repo_id(text: str) -> bool:
    """Whether ``text`` reads as a Hub target (the caller checks first that no such local path exists)."""
    try:
        return hub_target(text) is not None
    except UsageError:
        return False


def origin_of(text: str) -> Origin:
    """Where a target string sends qcheck: ``local`` when such a path exists or the text cannot name a repo,
    else ``hub``: the rule ``qcheck.readers.load_checkpoint`` applies, for results that carry no Checkpoint."""
    if not text or os.path.lexists(text):
        return "local"
    return "hub" if looks_like_repo_id(text) else "local"
