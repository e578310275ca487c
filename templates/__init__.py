"""Jinja2 templates of everything rendered onto the nodes (package data)."""
