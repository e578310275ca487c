"""The cluster inventory: an Ansible-style YAML file, validated before anything runs."""

from ascendctl.inventory.hosts import Host, Inventory
from ascendctl.inventory.loader import load_inventory

__all__ = ["Host", "Inventory", "load_inventory"]
