"""The suite's own guards (tests/conftest.py): under CI=true a skip, at run time or of a whole module, fails
the run with its reason; locally it stays a skip; CI gets the derandomised hypothesis profile without an
example database. Each case runs a small suite in-process under a copy of the real conftest."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

CONFTEST = (Path(__file__).resolve().parent / "conftest.py").read_text(encoding="utf-8")
SUITE = {
    "test_runtime_skip": "import pytest\n\ndef test_skip():\n    pytest.skip('extra missing')\n\n"
                         "def test_ok():\n    pass\n",
    "test_module_skip": "import pytest\n\npytest.importorskip('no_such_module_for_qcheck')\n\n"
                        "def test_never():\n    pass\n",
    "test_xfail": "import pytest\n\n@pytest.mark.xfail(reason='known', strict=True)\ndef test_known():\n"
                  "    assert False\n",
    "test_profile": "from pathlib import Path\n\nfrom hypothesis import settings\n\ndef test_profile():\n"
                    "    d = settings.default\n"
                    "    Path('profile.txt').write_text(f'{d.derandomize} {d.database} {d.deadline}')\n",
}


@pytest.fixture
def inner(pytester: pytest.Pytester) -> Iterator[pytest.Pytester]:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(**SUITE)
    profile = settings._current_profile  # the inner conftest loads a profile globally: restore ours after
    try:
        yield pytester
    finally:
        settings.load_profile(profile or "default")


def test_under_ci_every_skip_fails_with_its_reason(inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    result = inner.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1, skipped=1, xfailed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert "test_runtime_skip.py::test_skip: skipped under CI=true, where a skip is a failure" in out
    assert "extra missing" in out
    assert "skipped modules (a failure under CI=true)" in out
    assert "test_module_skip.py: skipped under CI=true" in out and "no_such_module_for_qcheck" in out
    assert (inner.path / "profile.txt").read_text() == "True None None"  # derandomised, no database, no deadline


def test_a_module_skip_alone_still_fails_under_ci(inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    result = inner.runpytest_inprocess("-p", "no:cacheprovider", "test_module_skip.py")
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_locally_a_skip_is_a_skip(inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("HYPOTHESIS_PROFILE", raising=False)
    result = inner.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, skipped=2, xfailed=1)
    assert result.ret == pytest.ExitCode.OK
    # the dev profile: no deadline (its other settings follow hypothesis's default, which itself turns
    # derandomised when hypothesis was imported on a CI machine)
    assert (inner.path / "profile.txt").read_text().endswith(" None")
