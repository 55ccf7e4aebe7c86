"""Human text output: dispatches on the result kind to ``qcheck.report.text_<kind>``."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from qcheck.model import Inspection
    from qcheck.report import Result


def render(result: Result) -> str:
    module = importlib.import_module(f"qcheck.report.text_{result.kind}")
    return module.render(result)


def describe_inspection(inspection: Inspection) -> str:
    module = importlib.import_module("qcheck.report.text_inspect")
    return module.describe(inspection)
