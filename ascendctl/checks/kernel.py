"""Kernel settings: checks over the facts of ascendctl/facts/kernel.py."""

from __future__ import annotations

from ascendctl.checks.expectations import Expectations
from ascendctl.checks.model import Outcome, Severity, Status
from ascendctl.checks.registry import node_check
from ascendctl.facts.kernel import NUMA_BALANCING
from ascendctl.facts.node import NodeFacts
from ascendctl.facts.system import NUMA


@node_check(
    "host.numa_balancing", category="host", severity=Severity.WARN,
    title="automatic NUMA balancing off",
    catches="kernel.numa_balancing on a node with several NUMA nodes: the kernel keeps unmapping and "
            "migrating the pages of ranks that are already bound to their NPU's NUMA node (latency "
            "jitter; vllm-ascend's tuning guide turns it off)",
    remediation="sysctl -w kernel.numa_balancing=0, and persist it in /etc/sysctl.d/",
)
def numa_balancing(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    setting = facts[NUMA_BALANCING]
    if setting is None:
        return Outcome.skip("kernel.numa_balancing not read (" + (facts.problem("numa_balancing") or "not gathered") + ")")
    if setting.mode is None:
        return Outcome.ok("the kernel has no automatic NUMA balancing")
    if not setting.enabled:
        return Outcome.ok("kernel.numa_balancing=0")
    numa = facts[NUMA]
    nodes = len(numa.nodes) if numa else 0
    if nodes <= 1:
        return Outcome.ok(f"kernel.numa_balancing={setting.mode}, but one NUMA node: nothing to migrate")
    return Outcome(Status.FAIL,
                   f"kernel.numa_balancing={setting.mode} on {nodes} NUMA nodes: the kernel migrates the "
                   "ranks' pages away from their CPU binding",
                   "sysctl -w kernel.numa_balancing=0; echo 'kernel.numa_balancing = 0' > "
                   "/etc/sysctl.d/90-ascend-numa.conf")
