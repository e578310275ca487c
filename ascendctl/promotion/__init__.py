"""Promotion on evidence (docs/promotion.md): pure judgments over figures a caller has
measured: the paired comparison of two releases, the long tail of answers, the soak and
the load envelope. Nothing here runs a benchmark, reads a clock or contacts a host."""
