from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.unit.cli_runner import CliRunner


@pytest.fixture(scope="module")
def cli_runner(tmp_path_factory) -> Iterator[CliRunner]:
    """One child interpreter for the module's CLI runs (tests/unit/cli_runner.py)."""
    runner = CliRunner(tmp_path_factory.mktemp("cli-runner"))
    yield runner
    runner.close()
