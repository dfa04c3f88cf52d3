"""pytest fixtures: a scripted model server per test, stopped after it. Give it its turns with
`server.script(...)` (or `.add(...)`) before starting the CLI. Registered by tests/conftest.py
(`pytest_plugins`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .anthropic import AnthropicServer
from .openai import OpenAIServer


@pytest.fixture
def anthropic_server() -> Iterator[AnthropicServer]:
    server = AnthropicServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def openai_server() -> Iterator[OpenAIServer]:
    server = OpenAIServer().start()
    try:
        yield server
    finally:
        server.stop()
