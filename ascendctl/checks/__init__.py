"""Preflight checks: pure functions over `NodeFacts` and the inventory's `Expectations`.

Importing this package registers every check (see docs/checks.md for the catalogue): the
modules below in catalogue order, then any other module of this package (a new check
module needs no wiring; docs/extending.md).
"""

import importlib as _importlib
import pkgutil as _pkgutil

from ascendctl.checks import npu, versions, roce, pcie, host, network, launch  # noqa: F401,I001  (registers, in catalogue order)
from ascendctl.checks.compat import load_matrix
from ascendctl.checks.expectations import Expectations, NodeExpectation, PinnedVersions
from ascendctl.checks.model import CheckResult, CheckSpec, Outcome, Severity, Status
from ascendctl.checks.registry import SPECS, overall_status, run_checks, selected

for _module in sorted(m.name for m in _pkgutil.iter_modules(__path__)):
    _importlib.import_module(f"{__name__}.{_module}")

__all__ = [
    "SPECS", "CheckResult", "CheckSpec", "Expectations", "NodeExpectation", "Outcome", "PinnedVersions",
    "Severity", "Status", "load_matrix", "overall_status", "run_checks", "selected",
]
