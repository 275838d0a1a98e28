"""Shared pytest fixtures for the server tests (test_server_*.py): one real `dsv4 serve` per test
module, stopped with SIGTERM at the end (the stop checks a clean exit and no sanitizer report)."""
import pytest

from dsv4_server import Server


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    assert s.stop() == 0
