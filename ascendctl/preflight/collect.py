"""One gather round trip on a host, and turning what came back into `NodeFacts`.

A round is one remote execution: the gather script (plus the own-units listing) sent on
stdin to `bash -s`. Its record is plain data (it travels as a playbook fact):

    {"output": str, "stderr": str, "exit_status": int | None, "timed_out": bool,
     "sent_at": epoch s, "received_at": epoch s, "duration_s": float}
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any

from ascendctl.facts import GatherOutputError, GatherParams, build_gather_script, split_sections
from ascendctl.facts.node import NodeFacts, build_node_facts
from ascendctl.preflight.owners import Owners, owners_script, parse_owners

STDERR_KEEP = 2000
DEFAULT_GATHER_TIMEOUT_S = 300.0

RunScript = Callable[..., Any]   # HostConnection.run_script / ModuleContext.run_script


def gather_round(run_script: RunScript, params: GatherParams, *, owners: bool = True,
                 timeout: float = DEFAULT_GATHER_TIMEOUT_S) -> dict[str, Any]:
    """Run the gather script once (ONE remote execution) and return its record."""
    nonce = secrets.token_hex(8)
    # the owners are listed after the facts: a PID `ss` saw is then either still there
    # (its unit is listed) or gone (see owners.parse_owners)
    script = build_gather_script(params, nonce, after_facts=owners_script(nonce) if owners else "")
    sent = time.time()
    res = run_script(script, shell="bash", timeout=timeout)
    received = time.time()
    return {"output": res.stdout, "stderr": res.stderr[-STDERR_KEEP:],
            "exit_status": res.exit_status, "timed_out": res.timed_out,
            "sent_at": sent, "received_at": received, "duration_s": round(received - sent, 3)}


def record_problem(record: Mapping[str, Any]) -> str | None:
    """Why a round's output cannot be used (None when it can)."""
    if record.get("error"):
        return str(record["error"])
    try:
        split_sections(record.get("output") or "")
    except GatherOutputError as err:
        why = str(err)
        if record.get("timed_out"):
            why = f"the gather script timed out ({why})"
        tail = (record.get("stderr") or "").strip().splitlines()
        rc = record.get("exit_status")
        return why + (f"; exit {rc}" if rc not in (None, 0) else "") + (f": {tail[-1][:200]}" if tail else "")
    return None


def node_facts(host: str, gather: Mapping[str, Any],
               pings: Mapping[str, Any] | None = None) -> NodeFacts:
    """`NodeFacts` from the first round's record, with the ping sections of a second
    round merged in. Raises GatherOutputError when the first round is unusable."""
    sections = split_sections(gather.get("output") or "")
    if pings and record_problem(pings) is None:
        extra = split_sections(pings["output"])
        sections.update({k: v for k, v in extra.items() if k.startswith(("ping:", "dfping:"))})
    return build_node_facts(sections, host=host, sent_at=gather.get("sent_at"),
                            received_at=gather.get("received_at"))


def owners_of(gather: Mapping[str, Any]) -> Owners:
    return parse_owners(gather.get("output") or "")


def section_text(gather: Mapping[str, Any], name: str) -> str:
    try:
        sec = split_sections(gather.get("output") or "").get(name)
    except GatherOutputError:
        return ""
    return sec.stdout if sec else ""
