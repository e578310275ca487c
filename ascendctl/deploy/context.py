"""Kept for callers outside the deploy package (ascendctl/status): node operations for a
host. A deploy's shared state is `ascendctl.deploy.run.DeployRun`, a part of the playbook
run's state; use `NodeOps.for_host(inv, host, conn)` in new code."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ascendctl.deploy.nodeops import NodeOps

if TYPE_CHECKING:
    from ascendctl.inventory import Host, Inventory
    from ascendctl.transport.remote import Remote


class DeployContext:
    def __init__(self, inv: "Inventory"):
        self.inv = inv

    def ops(self, host: "Host", conn: "Remote") -> NodeOps:
        return NodeOps.for_host(self.inv, host, conn)
