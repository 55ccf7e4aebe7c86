"""The ``hub`` fixture for the Hub tests (``pytest_plugins = ("conftest_hub",)``): a FakeHub on 127.0.0.1
selected through HF_ENDPOINT, no token, fast retries, and a client timeout far above any answer of the fake Hub
(10 s: a loaded CI machine must not turn a slow answer into a retry); the timeout tests shorten it themselves."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from hubserver import FakeHub


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """A running FakeHub; the environment points huggingface_hub and qcheck at it, with no token."""
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

