"""pytest plugin: real ``tritonserver`` processes for ``@pytest.mark.triton`` tests.

Fixtures:
- ``triton_server`` (module scope): one server on an empty repository, explicit model control;
  tests give their backends distinct model names so they never disturb each other.
- ``start_triton_server`` (function scope): a factory for extra servers (e.g. to kill one);
  every server it starts is closed at teardown.

If the binary is missing or the server does not start (e.g. a glibc too old for the wheel),
the test is skipped with the reason and the server's last log lines.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from azserve.backends.triton_launch import TritonProcess, TritonStartError, start_triton

# Tests stop servers only when idle: a short exit timeout keeps teardown from waiting for the
# python stubs to finalise (~3 s per model here); stop() removes the shm files they leave.
_TEST_ARGS = ("--exit-timeout-secs=1",)


def _start_or_skip(repo: Path) -> TritonProcess:
    try:
        return start_triton(repo, extra_args=_TEST_ARGS)
    except TritonStartError as exc:
        pytest.skip(f"tritonserver unavailable: {exc}")


@pytest.fixture(scope="module")
def triton_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonProcess]:
    """A running tritonserver; its repository is ``triton_server.repo_dir``."""
    server = _start_or_skip(tmp_path_factory.mktemp("triton") / "repo")
    yield server
    server.close()


@pytest.fixture
def start_triton_server(tmp_path: Path) -> Iterator[Callable[[], TritonProcess]]:
    """``start_triton_server()`` -> a fresh server on its own repository under ``tmp_path``."""
    started: list[TritonProcess] = []

    def start() -> TritonProcess:
        server = _start_or_skip(tmp_path / f"repo{len(started)}")
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()
