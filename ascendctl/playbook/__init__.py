"""The playbook engine: YAML plays of tasks, run over one SSH connection per host.

    from ascendctl.playbook import RunOptions, run_playbook
    report = run_playbook("playbooks/examples/demo.yaml", inventory, RunOptions(check=True))
    report.exit_code(), report.recap()

Other packages add modules with `ascendctl.playbook.modules.register_module` in their
own `playbook_modules.py` (see ascendctl/playbook/modules/base.py).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ascendctl.playbook.loader import load_playbook, templar_for
from ascendctl.playbook.model import Play, Playbook, Task
from ascendctl.playbook.reporting import Reporter
from ascendctl.playbook.results import RunReport, TaskHostResult
from ascendctl.playbook.runner import PlaybookRunner, RunOptions

if TYPE_CHECKING:
    from ascendctl.inventory import Inventory

__all__ = ["Play", "Playbook", "PlaybookRunner", "RunOptions", "RunReport", "Task",
           "TaskHostResult", "load_playbook", "run_playbook"]


def run_playbook(path: str | os.PathLike[str], inventory: "Inventory",
                 options: RunOptions | None = None, reporter: "Reporter | None" = None,
                 **runner_kwargs: Any) -> RunReport:
    """Load and run a playbook; returns the report (its exit_code() follows exitcodes.py)."""
    playbook = load_playbook(path)
    runner = PlaybookRunner(playbook, inventory, options or RunOptions(),
                            reporter or Reporter(), templar_for(playbook.path), **runner_kwargs)
    return runner.run()
