"""Suite-wide settings: the hypothesis profiles, under ``CI=true`` a skip is a failure, and the ``hub`` fixture.

A CI run must not go green by accident: if an extra fails to install, ``importorskip`` would turn its tests into
skips and the run would still pass. On CI (``CI`` set to ``true``/``1``/``yes``, as GitHub Actions and ``.ci/run``
do) every skip, at collection or at run time, is reported as a failure that names the reason. Locally skips stay
skips (``-rs`` lists them).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from support.hubserver import FakeHub

ON_CI = os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")

#: the caller's environment that changes what qcheck prints, reads or writes: the terminal width (qcheck fits text
#: to COLUMNS even when piped), NO_COLOR (rich then drops the colours a test asserts), a GitHub runner's step summary
#: and outputs (tests would append their hostile fixtures to the real job summary), a Hub mirror, token or offline
#: mode (huggingface_hub reads them once, at import), and qcheck's own settings
CALLER_ENV = ("COLUMNS", "NO_COLOR", "GITHUB_STEP_SUMMARY", "GITHUB_OUTPUT", "GITHUB_WORKSPACE", "HF_ENDPOINT",
              "HF_HUB_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
#: settings of the test support itself (where downloaded test inputs are kept): kept
TEST_SETTINGS = ("QCHECK_TEST_CACHE", "QCHECK_LLAMACPP_SOURCE")
# Removed here, when pytest loads this file: before collection imports huggingface_hub and before any fixture (a
# module-scoped one too) runs qcheck. Every run then starts from the same environment whatever the shell or CI
# runner exports (COLUMNS=60 failed 12 tests; HF_HUB_OFFLINE=1 failed test_adapters' Hub test); a test that needs
# one of these sets it itself with monkeypatch.
for _name in [*CALLER_ENV, *(k for k in os.environ if k.startswith("QCHECK_") and k not in TEST_SETTINGS)]:
    os.environ.pop(_name, None)
# qcheck's caches (eval references; the data cache of qcheck/datacache.py) go to a directory of this run, never the
# home directory; subprocesses inherit it. Removed when the run ends. The data cache (parsed matrix files, GGUF
# headers) is off: every test parses what it reads (a test that monkeypatches a reader must not get an earlier
# test's result back); the tests of the cache itself turn it on.
_CACHE_DIR = tempfile.mkdtemp(prefix="qcheck-test-cache-")
os.environ["QCHECK_CACHE_DIR"] = _CACHE_DIR
os.environ["QCHECK_CACHE"] = "off"
atexit.register(shutil.rmtree, _CACHE_DIR, True)
# the key cache entries are signed with (qcheck/cache_auth.py): a file of this run, outside the cache folder, never
# the home directory's
_KEY_DIR = tempfile.mkdtemp(prefix="qcheck-test-key-")
os.environ["QCHECK_CACHE_KEY_FILE"] = os.path.join(_KEY_DIR, "cache-key")
atexit.register(shutil.rmtree, _KEY_DIR, True)

pytest_plugins = ["pytester"]  # test_ci_guards runs small suites under this conftest

# No deadline anywhere: a per-example wall-clock limit is a flake on a loaded machine, not a test.
settings.register_profile("dev", deadline=None)
# CI: the same examples on every run (derandomised: a red run is reproducible, never a lottery), no example
# database (nothing written into the checkout), and no timing-based health checks.
settings.register_profile("ci", deadline=None, derandomize=True, database=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if ON_CI else "dev"))

SKIP_IS_FAILURE = ("skipped under CI=true, where a skip is a failure (a missing extra or tool must not pass "
                   "silently; install it, or run without CI=true to allow skips)")


def _skip_reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr: Any = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (path, line, "Skipped: reason")
        return str(longrepr[2])
    return str(longrepr)


def _fail_the_skip(report: pytest.CollectReport | pytest.TestReport) -> None:
    report.outcome = "failed"
    report.longrepr = f"{report.nodeid}: {SKIP_IS_FAILURE}: {_skip_reason(report)}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if ON_CI and report.skipped and not hasattr(report, "wasxfail"):
        _fail_the_skip(report)


#: modules skipped whole at collection (a module-level importorskip) under CI: (nodeid, reason)
_SKIPPED_MODULES: list[tuple[str, str]] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    outcome = yield
    report: pytest.CollectReport = outcome.get_result()
    if ON_CI and report.skipped:  # recorded, and the run fails at the end (a collection error would stop it)
        _SKIPPED_MODULES.append((report.nodeid, _skip_reason(report)))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _SKIPPED_MODULES:
        terminalreporter.section("skipped modules (a failure under CI=true)", red=True)
        for nodeid, reason in _SKIPPED_MODULES:
            terminalreporter.line(f"{nodeid}: {SKIP_IS_FAILURE}: {reason}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _SKIPPED_MODULES and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED

@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[FakeHub]:
    """A running FakeHub on 127.0.0.1; the environment points huggingface_hub and qcheck at it, with no token,
    fast retries, and a client timeout far above any answer of the fake Hub (10 s: a loaded CI machine must not
    turn a slow answer into a retry); the timeout tests shorten it themselves."""
    server = FakeHub(timeout_sleep=30.0).start()  # an injected timeout outlasts any client timeout
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("QCHECK_HUB_BACKOFF", "0.01")
    monkeypatch.setenv("QCHECK_HUB_TIMEOUT", "10")
    monkeypatch.setenv("QCHECK_HUB_RETRIES", "2")
    try:
        yield server
    finally:
        server.stop()
    assert not server.httpd.errors, "the fake Hub failed while answering:\n" + "\n".join(server.httpd.errors)


@pytest.fixture
def slow_resolver(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``getaddrinfo`` that never answers for ``*.slow.test`` (released at teardown): a resolver stuck for good,
    without depending on any real DNS."""
    import socket
    import threading

    release = threading.Event()
    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        if str(host).endswith(".slow.test"):
            release.wait()
            raise socket.gaierror(socket.EAI_NONAME, "released")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield
    release.set()
