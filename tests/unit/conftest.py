from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.unit.cli_runner import CliRunner, registered_runner


@pytest.fixture(scope="module", autouse=True)
def cli_runner(tmp_path_factory) -> Iterator[CliRunner]:
    """One child interpreter for the module's CLI runs (tests/unit/cli_runner.py), started
    at the first run; module_runner() gives it to helpers."""
    with registered_runner(tmp_path_factory.mktemp("cli-runner")) as runner:
        yield runner
