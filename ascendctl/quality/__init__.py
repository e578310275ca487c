"""The quality gate: a release's greedy answers checked against expected answers, or
against the previous release's answers token by token, before it takes traffic.

`run_quality_gate` (ascendctl/quality/gate.py) is what `ascendctl bench --quality` and
the rolling deploy call. The prompt sets it sends are read and validated with the
inventory (ascendctl/inventory/prompts.py), which knows nothing of the gate.
"""
