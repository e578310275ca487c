"""Everything `ascendctl status` needs from one node, in one remote execution.

Shipped with the call (ascendctl/transport/nodecall.py), so it answers even where no
release is installed. On the head it also proves serving: one real 1-token completion
through the API key (read here from the serving release's 0600 secrets.env, so it never
travels), plus /health and /metrics for display, and the supervisor's state.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

from ascendctl_runtime import engine_state as es
from ascendctl_runtime import healthstore, layout, maintenance, probe, promotion_store

NPU_SMI = "npu-smi"
FAULT_EVENTS_SHOWN = 10
HCCN_TOOL = "/usr/local/Ascend/driver/tools/hccn_tool"


def _tool(argv: list[str], timeout: float = 15.0) -> dict[str, Any]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return {"rc": 127, "out": f"{argv[0]}: not found"}
    except subprocess.TimeoutExpired:
        return {"rc": 124, "out": f"{argv[0]}: timed out after {timeout:.0f}s"}
    return {"rc": done.returncode, "out": done.stdout + done.stderr}


def _http(engine: probe.Engine, path: str) -> dict[str, Any]:
    try:
        status, body = engine.request("GET", path)
    except OSError as err:
        return {"status": 0, "body": "", "error": str(getattr(err, "reason", err))}
    return {"status": status, "body": body if isinstance(body, str) else json.dumps(body)}


def engine_units_state(root: str, engine_units: list[str], side_units: list[str]
                       ) -> dict[str, Any]:
    shows = es.read_units(engine_units + side_units)
    memory = (healthstore.read_json(healthstore.health_path(root, layout.AGENT_STATE))
              or {})
    memories = memory.get(layout.UNITS_DIR) or {}
    boot = es.boot_id()
    now = time.time()
    states = {}
    current = layout.current_release(root)
    secrets = es.secret_values(os.path.join(root, layout.RELEASES_DIR, current, layout.SECRETS_ENV)
                               if current else None)
    for unit in engine_units + side_units:
        state = es.classify(shows[unit], es.UnitMemory.from_dict(memories.get(unit)), boot, now)
        if unit in engine_units and state.state == es.CRASHED:
            state.journal = es.redact(es.journal_error(unit), secrets)
        states[unit] = state.to_dict()
    return {
        "states": states,
        "engine_pids": sorted(es.engine_pids({u: shows[u] for u in engine_units})),
        "starts": memory.get("starts") or {},
        "last_action": memory.get("last_action"),
        "boot_id": boot,
    }


def node_maintenance(root: str) -> dict[str, Any]:
    """The node's maintenance record and the fault monitor's latest events."""
    record = maintenance.read(root)
    events = healthstore.read_json(healthstore.health_path(root, layout.FAULT_EVENTS)) or {}
    view = healthstore.read_json(healthstore.health_path(root, layout.FAULT_VIEW)) or {}
    return {"maintenance": record.to_dict() if record else None,
            "fault_events": list(events.get("events") or [])[-FAULT_EVENTS_SHOWN:],
            "fault_signals": list(view.get("observations") or []),
            "fault_limits": view.get("limits")}


def op_status(root: str, engine_units: list[str], side_units: list[str], ports: int,
              engine_port: Optional[int] = None, model: Optional[str] = None,
              probe_timeout: float = 5.0, metrics_port: Optional[int] = None,
              router_metrics_port: Optional[int] = None) -> dict[str, Any]:
    """ENGINE_PORT: the group's API on this node (its head), probed deeply; in PD the unit's
    router. METRICS_PORT: this node's engine API server, for its /metrics (default
    ENGINE_PORT); ROUTER_METRICS_PORT: the PD router's own metrics."""
    current = layout.current_release(root)
    with ThreadPoolExecutor(max_workers=8) as pool:
        npu = pool.submit(_tool, [NPU_SMI, "info"])
        links = [pool.submit(_tool, [HCCN_TOOL, "-i", str(i), "-link", "-g"])
                 for i in range(ports)]
        units = pool.submit(engine_units_state, root, engine_units, side_units)
        head = None
        if engine_port:
            release = os.path.join(root, layout.RELEASES_DIR, current) if current else None
            secrets = os.path.join(release, layout.SECRETS_ENV) if release else None
            engine = probe.Engine("127.0.0.1", engine_port, probe.read_api_key(secrets),
                                  probe_timeout)
            quick = probe.Engine("127.0.0.1", engine_port, None, min(5.0, probe_timeout))
            served = model or (os.path.join(release, "model") if release else "")
            head = {"probe": pool.submit(probe.serving_probe, engine, served),
                    "health": pool.submit(_http, quick, "/health")}
        scraped = {}
        if metrics_port or engine_port:
            scraped["metrics"] = pool.submit(_http, probe.Engine(
                "127.0.0.1", metrics_port or engine_port or 0, None, min(5.0, probe_timeout)),
                "/metrics")
        if router_metrics_port:
            scraped["router_metrics"] = pool.submit(_http, probe.Engine(
                "127.0.0.1", router_metrics_port, None, min(5.0, probe_timeout)), "/metrics")
        result: dict[str, Any] = {
            "hostname": os.uname().nodename,
            "current": current,
            "time": time.time(),
            "npu_smi": npu.result(),
            "links": [future.result() for future in links],
            **units.result(),
            **node_maintenance(root),
        }
    for key, future in scraped.items():
        answer = future.result()
        result[key] = probe.parse_metrics(
            answer["body"], probe.ROUTER_METRICS if key == "router_metrics"
            else probe.METRICS_OF_INTEREST) if answer.get("status") == 200 else {}
    if head is not None:
        result["probe"] = head["probe"].result()
        result["health"] = {k: v for k, v in head["health"].result().items() if k != "body"}
        path = healthstore.health_path(root, layout.SUPERVISOR_STATE)
        result["supervisor"] = healthstore.read_json(path)
        result["supervisor_age_s"] = healthstore.file_age_s(path)
        hold = healthstore.read_hold(root)
        result["hold"] = hold.to_dict() if hold else None
        result["envelope"] = serving_envelope(root, current)
    return result


def serving_envelope(root: str, current: Optional[str]) -> Optional[int]:
    """The load envelope of the serving release (its newest passing envelope evidence)."""
    if current is None:
        return None
    try:
        return promotion_store.envelope_of(root, current)
    except (OSError, ValueError):
        return None


def op_events(root: str, tail: int = 200) -> dict[str, Any]:
    return {"events": healthstore.read_events(root, int(tail))}


OPERATIONS = {"status": op_status, "events": op_events}


def run_call(payload: bytes) -> int:
    request = json.loads(payload)
    try:
        op = OPERATIONS[request["op"]]
        result = op(request["root"], **request.get("kwargs", {}))
    except (OSError, ValueError, TypeError, KeyError) as err:
        print(json.dumps({"error": f"{request.get('op')}: {type(err).__name__}: {err}"}))
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(run_call(sys.stdin.buffer.read()))
