"""The promotion gates run against a deployment (docs/promotion.md): each gate measures on
the serving group's head (runtime promotion_node.py) and judges with ascendctl.promotion."""
