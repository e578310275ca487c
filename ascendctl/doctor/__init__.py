"""`ascendctl doctor`: collect logs and state from every node (one remote run each), match
them against the table of known error signatures, explain each match (node, log line,
cause, fix), and pack everything into one support bundle."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from ascendctl.doctor.collect import collect, parse_since
from ascendctl.doctor.report import DoctorReport
from ascendctl.doctor.scan import Finding, scan_collections
from ascendctl.doctor.signatures import default_signatures, load_signatures
from ascendctl.inventory import Inventory


def run_doctor(inv: Inventory, pool: Any, *, since_s: int,
               bundle: Optional[Path] = None) -> DoctorReport:
    from ascendctl.doctor.bundle import controller_secrets, scrub, write_bundle

    collections = collect(inv, pool, since_s)
    scrub(collections, controller_secrets(inv))
    # each serving group fails on its own: its findings compared and ordered within it,
    # with a probable root cause of its own
    findings = []
    for group in inv.serving_groups:
        members = set(group.hosts)
        found = scan_collections({c.node: c.files for c in collections
                                  if c.ok and c.node in members}, default_signatures())
        for finding in found:
            finding.group = group.name if inv.replicated else None
        findings += found
    if inv.replicated:
        findings = order_groups(findings)
    report = DoctorReport(cluster=inv.cluster.name, since_s=since_s,
                          collections=collections, findings=findings)
    if bundle is not None:
        write_bundle(bundle, inv, collections, findings, since_s=since_s)
        report.bundle = str(bundle)
    return report


def order_groups(findings: list[Finding]) -> list[Finding]:
    """Errors first, the earliest first, across groups (each keeps its root cause)."""
    from ascendctl.doctor.scan import SEVERITY_RANK

    return sorted(findings, key=lambda f: (SEVERITY_RANK[f.severity], f.first_seen is None,
                                           f.first_seen or "", f.node, f.id))


__all__ = ["DoctorReport", "load_signatures", "parse_since", "run_doctor"]
