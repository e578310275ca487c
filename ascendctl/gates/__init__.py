"""Promotion gates: running them, their evidence records and pictures (docs/promotion.md)."""
