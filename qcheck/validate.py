"""One way to check untrusted structured data: typed getters whose errors name the path to the bad value.

Policies (TOML), matrix data (TOML), eval task lines (JSON) and saved inspections (JSON) are all read the
same way: a value is taken at a place (``At``), checked, and a wrong value raises the caller's own error
class with one line that says where and what, e.g.
``qcheck.toml: targets[0].gpu: must be a string or a list of strings, not an integer``. Each caller keeps
its error class (and so its exit code, 2) by giving ``At`` a factory; the wording is shared.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

#: builds the caller's exception from (path, problem, allowed values or None)
ErrorFactory = Callable[[str, str, "str | None"], Exception]


@dataclass(frozen=True)
class At:
    """A place in a document: ``At(err).key("targets").index(0).key("gpu").path == "targets[0].gpu"``."""

    error: ErrorFactory
    path: str = ""

    def key(self, name: str) -> At:
        return At(self.error, f"{self.path}.{name}" if self.path else str(name))

    def index(self, i: int) -> At:
        return At(self.error, f"{self.path}[{i}]")

    def fail(self, problem: str, allowed: str | None = None) -> NoReturn:
        raise self.error(self.path, problem, allowed)


def type_name(value: Any) -> str:
    """A value's type in the words of TOML and JSON documents, for messages ("a table", "an integer")."""
    if value is None:
        return "null"
    return {dict: "a table", list: "a list", tuple: "a list", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number"}.get(type(value), type(value).__name__)


def shown(value: Any, limit: int = 60) -> str:
    """A bad value as a message shows it: scalars by repr (cut at ``limit``), containers by type."""
    if isinstance(value, (dict, list, tuple)):
        return type_name(value)
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def table(value: Any, at: At) -> dict[str, Any]:
    if not isinstance(value, dict):
        at.fail(f"must be a table, not {type_name(value)}")
    return value


def check_keys(value: Mapping[str, Any], allowed: Collection[str], at: At, *,
               required: Collection[str] = ()) -> None:
    """Every key is known (a near miss is named: ``did you mean 'max-kld'?``) and every required key is there."""
    ordered = list(allowed)
    for key in value:
        if key not in allowed:
            alias = str(key).replace("_", "-")
            if alias in allowed and alias != key:
                hint = f"; did you mean {alias!r}?"
            else:
                import difflib  # only for a wrong key

                close = difflib.get_close_matches(str(key), [str(a) for a in ordered], n=1, cutoff=0.6)
                hint = f"; did you mean {close[0]!r}?" if close else ""
            at.key(str(key)).fail(f"unknown key{hint}", ", ".join(str(a) for a in ordered))
    for key in required:
        if key not in value:
            at.key(key).fail("missing")


def string(value: Any, at: At, *, empty: bool = False, strip: bool = True) -> str:
    """A string; blank is an error unless ``empty``."""
    if not isinstance(value, str) or (not empty and not value.strip()):
        at.fail(f"must be a {'' if empty else 'non-empty '}string, not {shown(value)}")
    return value.strip() if strip else value


def strings(value: Any, at: At, *, single: bool = True, empty_list: bool = True) -> list[str]:
    """A list of non-empty strings (or, with ``single``, one string standing for a list of one)."""
    items = [value] if single and isinstance(value, str) else value
    if not isinstance(items, list):
        at.fail(f"must be {'a string or ' if single else ''}a list of strings, not {type_name(value)}")
    if not items and not empty_list:
        at.fail("must not be empty")
    return [string(item, at.index(i)) for i, item in enumerate(items)]


def integer(value: Any, at: At, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """An integer (never a boolean) within the bounds given."""
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum) or (
            maximum is not None and value > maximum):
        if minimum is not None and maximum is not None:
            want = f"an integer from {minimum} to {maximum}"
        elif minimum is not None:
            want = f"an integer of at least {minimum}"
        else:
            want = "an integer"
        at.fail(f"must be {want}, not {shown(value)}")
    return value


def boolean(value: Any, at: At) -> bool:
    if not isinstance(value, bool):
        at.fail(f"must be true or false, not {shown(value)}", "true, false")
    return value


def choice(value: Any, at: At, allowed: Collection[str]) -> str:
    if not isinstance(value, str) or value not in allowed:
        at.fail(f"{shown(value)} is not allowed", ", ".join(allowed))
    return value
