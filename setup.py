"""Packages of the wheel (everything else is in pyproject.toml).

The repository keeps the data the tool reads at run time at the top level (templates/,
playbooks/, runtime/); the wheel maps them into the installed packages, found with
importlib.resources (ascendctl/paths.py). Here rather than in pyproject.toml because a
static list there cannot combine discovered packages with mapped directories.

The lab (ascendctl_lab, the simulated cluster) is in the same wheel: an extra can only add
dependencies, never files, and a second distribution would have to come from an index for
`pip install 'ascendctl[lab]'` to find it. The product never imports it unless a lab
command runs, after the `lab` extra's dependencies were found (ascendctl/extras.py).
"""

from setuptools import find_packages, setup

MAPPED = {
    "ascendctl.templates": "templates",
    "ascendctl.playbooks": "playbooks",
    "ascendctl_runtime": "runtime/ascendctl_runtime",
    "ascendctl_runtime.faults": "runtime/ascendctl_runtime/faults",
}

setup(
    packages=find_packages(include=["ascendctl", "ascendctl.*", "ascendctl_lab", "ascendctl_lab.*"])
    + list(MAPPED),
    package_dir=MAPPED,
)
