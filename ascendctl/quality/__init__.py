"""The quality gate: a release's greedy answers checked against expected answers, or
against the previous release's answers token by token, before it takes traffic.

`run_quality_gate` (ascendctl/quality/gate.py) is what `ascendctl bench --quality` and
the rolling deploy call. Nothing is imported here: the inventory's validators import
ascendctl.quality.prompts, and this package must not pull the inventory back in.
"""
