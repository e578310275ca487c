"""The preflight, deploy and rollback plays (package data)."""
