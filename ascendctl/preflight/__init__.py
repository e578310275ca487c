"""Preflight: gather facts on every node in one round trip, judge them on the controller.

`playbooks/preflight.yaml` runs two tasks through the playbook engine: `preflight_gather`
on every host (the gather script of `ascendctl.facts`, one remote execution) and
`preflight_checks` once on the controller (Expectations from the inventory, the checks
of `ascendctl.checks`, one `PreflightReport`). `ascendctl preflight` and `ascendctl facts`
are thin CLI layers over `ascendctl.preflight.run` (see docs/preflight.md).
"""
