"""The JSON contract as files: load the schemas shipped under ``qcheck/schemas/`` and validate outputs against
them (draft 2020-12; schemas refer to each other by ``$id``, e.g. ``urn:qcheck:schema:inspection``)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource

SCHEMAS = Path(__file__).resolve().parents[2] / "qcheck" / "schemas"


@functools.cache
def _registry() -> tuple[dict[str, dict[str, Any]], Registry]:
    by_name: dict[str, dict[str, Any]] = {}
    resources = []
    for path in sorted(SCHEMAS.glob("*.schema.json")):
        schema = json.loads(path.read_text(encoding="utf-8"))
        by_name[path.name.removesuffix(".schema.json")] = schema
        resources.append((schema["$id"], Resource.from_contents(schema)))
    return by_name, Registry().with_resources(resources)


def schema(name: str) -> dict[str, Any]:
    """The schema ``qcheck/schemas/<name>.schema.json``."""
    return _registry()[0][name]


def validate(data: Any, name: str) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``data`` fits schema ``name`` (format checks on)."""
    by_name, registry = _registry()
    validator = jsonschema.Draft202012Validator(by_name[name], registry=registry,
                                                format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    validator.validate(data)
