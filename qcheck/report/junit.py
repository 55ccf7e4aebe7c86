"""JUnit XML (``--format junit`` / ``--junit FILE``) so CI test UIs draw the compatibility matrix.

One ``<testcase>`` per (model, engine, GPU) verdict, classname = the model, name = "engine version x GPU";
a verdict that makes the run fail is a ``<failure>`` whose message is the status and the reason. Eval:
one test case per (candidate, threshold); a threshold whose metric could not be measured is ``<skipped>``.
A model that could not be judged is an ``<error>``; a skipped Git LFS pointer is ``<skipped>``.
Built with ElementTree (escaping is its job); characters XML 1.0 cannot carry are replaced first.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from qcheck.report.findings import result_data, target_label, verdict_fails

#: characters XML 1.0 forbids even escaped (C0 controls except tab/LF/CR, surrogates, U+FFFE/U+FFFF)
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def clean(text: Any) -> str:
    """``text`` as a string XML can hold (forbidden characters become U+FFFD)."""
    return _INVALID_XML.sub("\ufffd", str(text))


class _Suite:
    def __init__(self, name: str):
        self.el = ET.Element("testsuite", name=clean(name))
        self.counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}

    def case(self, classname: str, name: str, *, failure: tuple[str, str, str] | None = None,
             error: tuple[str, str, str] | None = None, skipped: str | None = None,
             out: list[str] | None = None) -> None:
        """Add a test case; ``failure``/``error`` are (message, type, details)."""
        case = ET.SubElement(self.el, "testcase", classname=clean(classname), name=clean(name), time="0")
        self.counts["tests"] += 1
        for tag, value in (("failure", failure), ("error", error)):
            if value:
                message, kind, details = value
                el = ET.SubElement(case, tag, message=clean(message), type=clean(kind))
                el.text = clean(details)
                self.counts["failures" if tag == "failure" else "errors"] += 1
        if skipped is not None:
            ET.SubElement(case, "skipped", message=clean(skipped))
            self.counts["skipped"] += 1
        if out:
            ET.SubElement(case, "system-out").text = clean("\n".join(out))

    def finish(self) -> ET.Element:
        for k, v in self.counts.items():
            self.el.set(k, str(v))
        self.el.set("time", "0")
        return self.el


def _verdict_case(suite: _Suite, model: str, v: dict[str, Any], policy: dict[str, Any]) -> None:
    label = target_label(v)
    details = []
    for key, title in (("kernel", "kernel"), ("requires", "requires"), ("reasons", "why"),
                       ("warnings", "warning"), ("suggestions", "try")):
        value = v.get(key)
        for item in ([value] if isinstance(value, str) else value or []):
            details.append(f"{title}: {item}")
    for s in v.get("sources") or []:
        if isinstance(s, dict):
            details.append(f"source: {s.get('ref')}" + (f" @ {s['version']}" if s.get("version") else ""))
    memory = v.get("memory") or {}
    if isinstance(memory, dict) and memory.get("summary"):
        details.append(f"memory: {memory['summary']}")
    status = str(v.get("status"))
    startup: dict[str, Any] = v["startup"] if isinstance(v.get("startup"), dict) else {}
    if startup.get("message"):
        details.insert(0, f"start-up: {startup['message']}")
    failure = None
    if verdict_fails(v, policy):
        outcome: dict[str, Any] = v["outcome"] if isinstance(v.get("outcome"), dict) else {}
        because = [str(b) for b in outcome.get("because") or []]
        reasons = "; ".join(str(r) for r in outcome.get("reasons") or v.get("reasons") or [])
        status_text = ("does-not-start" if "does-not-start" in because else "start-up-unknown"
                       if "start-up-unknown" in because else because[0] if because else status)
        failure = (f"{status_text}: {reasons}".rstrip(": "), status_text, "\n".join(details))
    suite.case(model, label, failure=failure, out=[f"status: {status}", *details])


def _check_suite(data: dict[str, Any]) -> ET.Element:
    insp = data.get("inspection") or {}
    model = str(insp.get("path", "?"))
    suite = _Suite(f"qcheck check {model}")
    for v in data.get("verdicts") or []:
        _verdict_case(suite, model, v, data.get("policy") or {})
    return suite.finish()


def _eval_suites(data: dict[str, Any], name: str = "qcheck eval") -> list[ET.Element]:
    suite = _Suite(name)
    thresholds = {k: v for k, v in (data.get("thresholds") or {}).items() if k not in ("tier", "use_intervals")}
    for c in data.get("candidates") or []:
        cname = str(c.get("name"))
        gate = c.get("gate") or {}
        failed = {f.get("threshold"): f for f in gate.get("failures") or []}
        names = list(dict.fromkeys([*(gate.get("checked") or []), *(gate.get("skipped") or []), *thresholds]))
        if not names:
            suite.case(f"quality.{cname}", "gate (no thresholds set)", out=[f"backend: {c.get('backend')}"])
        for t in names:
            limit = thresholds.get(t)
            title = f"{t.replace('_', '-')} {limit:g}" if isinstance(limit, (int, float)) else t.replace("_", "-")
            if t in failed:
                f = failed[t]
                suite.case(f"quality.{cname}", title, failure=(str(f.get("message")), "quality-threshold",
                                                              f"value {f.get('value')} limit {f.get('limit')} "
                                                              f"({f.get('basis')})"))
            elif t in (gate.get("skipped") or []):
                suite.case(f"quality.{cname}", title, skipped="the metric could not be measured on these tasks")
            else:
                suite.case(f"quality.{cname}", title)
    return [suite.finish()]


def _gate_suites(data: dict[str, Any]) -> list[ET.Element]:
    suites = []
    for m in data.get("models") or []:
        model = str(m.get("name") or m.get("path"))
        suite = _Suite(f"qcheck gate {model}")
        status = m.get("status")
        if status == "error":
            suite.case(model, "inspect", error=(str(m.get("error")), "input-not-judged", str(m.get("error"))))
        elif status == "skipped":
            suite.case(model, "inspect", skipped=str(m.get("error") or "skipped"))
        else:
            for v in m.get("verdicts") or []:
                _verdict_case(suite, model, v, v.get("policy") or {})
        suites.append(suite.finish())
    quality = data.get("quality") or {}
    if quality.get("error"):
        suite = _Suite("qcheck gate quality")
        suite.case("quality", "eval", error=(str(quality["error"]), "quality-not-measured", str(quality["error"])))
        suites.append(suite.finish())
    elif quality.get("eval"):
        suites.extend(_eval_suites(quality["eval"], "qcheck gate quality"))
    return suites


def _inspect_suite(data: dict[str, Any]) -> ET.Element:
    model = str(data.get("path", "?"))
    suite = _Suite(f"qcheck inspect {model}")
    out = [f"{f.get('kind')}: {f.get('message')}" for f in data.get("findings") or [] if isinstance(f, dict)]
    out += [f"warning: {w}" for w in data.get("warnings") or []]
    q = data.get("quantization") or {}
    name = f"inspect ({q.get('method')})"
    if data.get("container") == "pickle":
        suite.case(model, name, error=("pickle checkpoint: never loaded", "unsafe-pickle", "\n".join(out)))
    else:
        suite.case(model, name, out=out)
    return suite.finish()


def _probe_suite(data: dict[str, Any]) -> ET.Element:
    """``qcheck probe``: one case per capability; a required one that is not supported is a failure."""
    url = str(data.get("url", "?"))
    suite = _Suite(f"qcheck probe {url}")
    required = set(data.get("required") or [])
    for c in data.get("capabilities") or []:
        if not isinstance(c, dict):
            continue
        detail = "\n".join(str(x) for x in (c.get("detail"), c.get("server_message")) if x)
        failing = c.get("id") in required and c.get("status") != "supported"
        suite.case(url, str(c.get("id")), out=[f"{c.get('status')}: {detail}"],
                   failure=(f"{c.get('status')}: {c.get('detail')}", str(c.get("status")), detail) if failing else None)
    return suite.finish()


def build(result: Any) -> ET.Element:
    """The ``<testsuites>`` element of a result."""
    data, kind = result_data(result)
    if kind == "check":
        suites = [_check_suite(data)]
    elif kind == "eval":
        suites = _eval_suites(data)
    elif kind == "gate":
        suites = _gate_suites(data)
    elif kind == "inspect":
        suites = [_inspect_suite(data)]
    elif kind == "probe":
        suites = [_probe_suite(data)]
    elif kind in ("check-set", "inspect-set"):  # --all: one suite per model
        one = _check_suite if kind == "check-set" else _inspect_suite
        suites = [one(r) for r in data.get("results") or [] if isinstance(r, dict)]
    else:
        from qcheck.errors import UsageError

        raise UsageError(f"--format junit is not available for qcheck {kind}")
    root = ET.Element("testsuites", name=f"qcheck {kind}")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for s in suites:
        root.append(s)
        for k in totals:
            totals[k] += int(s.get(k, "0"))
    for k, v in totals.items():
        root.set(k, str(v))
    root.set("time", "0")
    return root


def render(result: Any) -> str:
    root = build(result)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
