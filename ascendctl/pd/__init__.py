"""Prefill/decode (PD) disaggregation: the layout, its cross-node rules, the port ledger.

Pure functions over data: nothing here contacts a host or starts an engine.
"""
