"""NPU metrics for Prometheus, named like Huawei's npu-exporter where they overlap, and
the node agent's HTTP face.

    python3 -m ascendctl_runtime.exporter [--listen ADDR] [--port 9101] [--cache-seconds 5]
                                          [--agent <release>/agent.json]

Each scrape reads `npu-smi info` and every RoCE port's link and net health through
hccn_tool (results cached for a few seconds, so several scrapers cost one read). With
--agent the same process runs the node agent (ascendctl_runtime.agent) and serves:

    /metrics        NPU metrics plus this rank's engine state (and on the head the
                    supervisor's verdict: serving up, recovering, gave up)
    /health/state   this rank's engine state as JSON (the supervisor and `status` read it)
    /health/plan    on the head: the supervisor's signed plan while it is fresh
    /health/gateway on the gateway host: the groups its watcher took out (gateway.py)
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable, Optional

from ascendctl.facts.npu_smi import NpuSmiInfo
from ascendctl_runtime import engine_state, healthstore, layout, npu
from ascendctl_runtime.listener import ANY_IPV4, bound_address, http_server
from ascendctl_runtime.nodeutil import host_port

HEALTHY = "OK"


def _labels(**labels: object) -> str:
    def escape(value: object) -> str:
        return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in labels.items()) + "}"


def _number(value: float) -> str:
    """Exact for integers and epoch timestamps (`:g` would round 1796120015 to 1.79612e+09)."""
    if isinstance(value, bool) or float(value).is_integer():
        return str(int(value))
    return repr(float(value))


class Metrics:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.declared: set[str] = set()

    def add(self, name: str, help_text: str, value: float, kind: str = "gauge",
            **labels: object) -> None:
        if name not in self.declared:
            self.declared.add(name)
            self.lines.append(f"# HELP {name} {help_text}")
            self.lines.append(f"# TYPE {name} {kind}")
        label_text = _labels(**labels) if labels else ""
        self.lines.append(f"{name}{label_text} {_number(value)}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def render_metrics(info: Optional[NpuSmiInfo], error: str,
                   ports: list[npu.PortState]) -> str:
    """The exposition text for one reading (pure: tested against recorded output)."""
    metrics = Metrics()
    metrics.add("ascendctl_npu_smi_up", "1 if npu-smi info answered with a device table.",
                1 if info is not None else 0)
    if info is None:
        return metrics.text()
    chips = info.chips
    healthy = sum(1 for chip in chips if chip.health == HEALTHY)
    unknown = sum(1 for chip in chips if chip.health.upper() == "UNKNOWN")
    metrics.add("machine_npu_nums", "Amount of npu installed on the machine.", len(chips))
    metrics.add("machine_healthy_npu_nums", "Amount of healthy npu on the machine.", healthy)
    metrics.add("machine_unhealthy_npu_nums", "Amount of unhealthy npu on the machine.",
                len(chips) - healthy - unknown)
    for chip in chips:
        device_id = chip.phy_id if chip.phy_id is not None else chip.npu_id
        labels = {"id": device_id, "model_name": chip.name, "pcie_bus_info": chip.bus_id}
        health = 1 if chip.health == HEALTHY else (-1 if chip.health.upper() == "UNKNOWN" else 0)
        metrics.add("npu_chip_info_health_status",
                    "the npu health status: 1 healthy, 0 unhealthy, -1 unknown", health, **labels)
        if chip.hbm_used_mb is not None and chip.hbm_total_mb:
            metrics.add("npu_chip_info_hbm_used_memory", "the npu hbm used memory (MB)",
                        chip.hbm_used_mb, **labels)
            metrics.add("npu_chip_info_hbm_total_memory", "the npu hbm total memory (MB)",
                        chip.hbm_total_mb, **labels)
            metrics.add("npu_chip_info_hbm_utilization", "the npu hbm memory utilization (%)",
                        round(100.0 * chip.hbm_used_mb / chip.hbm_total_mb, 2), **labels)
        if chip.aicore_pct is not None:
            metrics.add("npu_chip_info_utilization", "the ai core utilization (%)",
                        chip.aicore_pct, **labels)
        if chip.temp_c is not None:
            metrics.add("npu_chip_info_temperature", "the npu temperature (C)", chip.temp_c,
                        **labels)
        if chip.power_w is not None:
            metrics.add("npu_chip_info_power", "the npu power (W)", chip.power_w, **labels)
    metrics.add("npu_chip_info_process_info_num", "number of processes holding NPUs",
                len(info.processes))
    for port in ports:
        link = -1 if port.link_up is None else int(port.link_up)
        net = -1 if port.net_health_ok is None else int(port.net_health_ok)
        metrics.add("npu_chip_info_link_status", "the npu roce link status: 1 UP, 0 DOWN, -1 unknown",
                    link, id=port.device_id)
        metrics.add("npu_chip_info_network_status",
                    "the npu network health: 1 healthy, 0 unhealthy, -1 unknown", net,
                    id=port.device_id)
    return metrics.text()


def render_agent_metrics(metrics: Metrics, snapshot: dict[str, Any]) -> None:
    """This rank's engine state (pure: from the agent's snapshot)."""
    for unit, state in sorted((snapshot.get("units") or {}).items()):
        name = state.get("state") or "unknown"
        metrics.add("ascendctl_engine_up", "1 if the engine unit is active", int(
            name == engine_state.RUNNING), unit=unit)
        for choice in (engine_state.RUNNING, engine_state.STARTING, engine_state.STOPPING,
                       engine_state.CRASHED, engine_state.STOPPED, engine_state.NOT_STARTED,
                       engine_state.MISSING):
            metrics.add("ascendctl_engine_state", "the engine unit's state (1 for the "
                        "current one)", int(name == choice), unit=unit, state=choice)
        if name == engine_state.RUNNING and state.get("since"):
            metrics.add("ascendctl_engine_start_time_seconds", "when the engine unit last "
                        "became active (epoch seconds): changes() counts restarts",
                        round(float(state["since"]), 3), unit=unit)
        metrics.add("ascendctl_engine_starts_total", "engine starts by the recovery agent "
                    "in this release", int((snapshot.get("starts") or {}).get(unit, 0)),
                    kind="counter", unit=unit)
    record = snapshot.get("maintenance") or {}
    for choice in ("drained", "isolated"):
        metrics.add("ascendctl_node_maintenance", "1 while the node is out of serving in this "
                    "state (ascendctl node drain, or the fault policy)",
                    int(record.get("state") == choice), state=choice)
    faults = snapshot.get("faults") or {}
    if faults:
        latest: dict[str, float] = {}
        for event in faults.get("events") or []:
            action = str(event.get("action") or "alert")
            latest[action] = max(latest.get(action, 0.0), float(event.get("time") or 0.0))
        for action, at in sorted(latest.items()):
            metrics.add("ascendctl_fault_action_time_seconds", "when the fault policy last "
                        "took this action on the node (epoch seconds)", round(at, 3),
                        action=action)
        metrics.add("ascendctl_fault_signals", "fault signals present at the last reading",
                    len(faults.get("observations") or []))
    holders = snapshot.get("npu") or {}
    if holders.get("ok"):
        foreign = holders.get("foreign") or []
        metrics.add("ascendctl_npu_foreign_processes", "processes holding this node's NPUs "
                    "that are not the engine's", len(foreign))
        metrics.add("ascendctl_npu_foreign_hbm_bytes", "HBM held by processes that are not "
                    "the engine's", sum(int(p.get("mem_mb") or 0) for p in foreign) * 2**20)
        metrics.add("ascendctl_npu_processes", "processes holding this node's NPUs",
                    len(holders.get("processes") or []))


def render_supervisor_metrics(metrics: Metrics, state: Optional[dict[str, Any]],
                              age_s: Optional[float], fresh_s: float) -> None:
    """The head's supervisor verdict (pure: from its state file and that file's age)."""
    up = state is not None and age_s is not None and age_s <= fresh_s
    metrics.add("ascendctl_supervisor_up", "1 while the gang supervisor updates its state",
                int(up))
    if not up or state is None:
        return
    phase = state.get("phase") or "serving"
    probe = state.get("probe") or {}
    serving = phase == "serving" and bool(probe.get("ok"))
    metrics.add("ascendctl_serving_up", "1 if the last real completion through the API "
                "key succeeded (the deep probe, never /health)", int(serving))
    if probe.get("seconds") is not None:
        metrics.add("ascendctl_serving_probe_seconds", "duration of the last deep probe",
                    float(probe["seconds"]))
    metrics.add("ascendctl_supervisor_held", "1 while a hold file holds recovery",
                int(bool(state.get("held"))))
    metrics.add("ascendctl_group_recovering", "1 while the group is being restarted",
                int(phase in ("stopping", "npus", "backoff", "starting", "warming")))
    metrics.add("ascendctl_group_gave_up", "1 when recovery gave up after its attempts",
                int(phase == "gave-up"))
    metrics.add("ascendctl_group_attempt", "the current recovery attempt (0: none)",
                int(state.get("attempt") or 0))
    metrics.add("ascendctl_group_recoveries_total", "recoveries that ended serving, this "
                "release", int(state.get("recoveries_total") or 0), kind="counter")
    metrics.add("ascendctl_group_generation", "the supervisor's plan generation",
                int(state.get("generation") or 0))


def node_problems(info: Optional[NpuSmiInfo], ports: list[npu.PortState],
                  snapshot: Optional[dict[str, Any]]) -> int:
    """How many things are wrong on this node (serving may still work: degraded)."""
    count = 0 if info is not None else 1
    if info is not None:
        count += sum(1 for chip in info.chips if chip.health != HEALTHY)
    count += sum(1 for port in ports if port.link_up is False)
    if snapshot is not None:
        count += sum(1 for state in (snapshot.get("units") or {}).values()
                     if state.get("state") != engine_state.RUNNING)
        count += len((snapshot.get("npu") or {}).get("foreign") or [])
    return count


class Collector:
    def __init__(self, cache_seconds: float, reader: Optional[npu.CachedReader] = None,
                 agent: Any = None):
        self.cache_seconds = cache_seconds
        self.reader = reader or npu.CachedReader()
        self.agent = agent
        self.lock = threading.Lock()
        self.cached_at = float("-inf")
        self.cached = ""
        self.cached_parts: tuple[Optional[NpuSmiInfo], list[npu.PortState]] = (None, [])

    def hardware(self) -> str:
        with self.lock:
            if time.monotonic() - self.cached_at < self.cache_seconds:
                return self.cached
            started = time.monotonic()
            info, error = self.reader.read(self.cache_seconds)
            ports: list[npu.PortState] = []
            if info is not None:
                ids = sorted({chip.phy_id if chip.phy_id is not None else chip.npu_id
                              for chip in info.chips})
                ports = [npu.read_port(device_id) for device_id in ids]
            text = render_metrics(info, error, ports)
            text += (f"# HELP ascendctl_exporter_scrape_seconds time spent reading the tools\n"
                     f"# TYPE ascendctl_exporter_scrape_seconds gauge\n"
                     f"ascendctl_exporter_scrape_seconds {time.monotonic() - started:.3f}\n")
            self.cached, self.cached_at = text, time.monotonic()
            self.cached_parts = (info, ports)
            return text

    def collect(self) -> str:
        text = self.hardware()
        if self.agent is None:
            return text
        snapshot = self.agent.snapshot()
        metrics = Metrics()
        render_agent_metrics(metrics, snapshot)
        info, ports = self.cached_parts
        metrics.add("ascendctl_node_problems", "problems on this node: unhealthy NPUs, RoCE "
                    "links down, engine units not running, foreign NPU processes",
                    node_problems(info, ports, snapshot))
        if self.agent.config.is_head:
            path = healthstore.health_path(self.agent.config.root,
                                           layout.SUPERVISOR_STATE)
            render_supervisor_metrics(metrics, healthstore.read_json(path),
                                      healthstore.file_age_s(path),
                                      fresh_s=self.agent.config.plan_ttl_s)
        return text + metrics.text()


def make_handler(collector: Collector, gateway: Any = None):
    agent = collector.agent

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server API)
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self.answer(200, collector.collect().encode(),
                            "text/plain; version=0.0.4; charset=utf-8")
            elif path == "/health/state" and agent is not None:
                self.answer(200, json.dumps(agent.snapshot()).encode(), "application/json")
            elif path == "/health/plan" and agent is not None and agent.config.is_head:
                plan_path = healthstore.health_path(agent.config.root, layout.PLAN_FILE)
                age = healthstore.file_age_s(plan_path)
                document = healthstore.read_json(plan_path)
                if document is None or age is None or age > agent.config.plan_ttl_s:
                    self.send_error(404, "no current plan")
                    return
                self.answer(200, json.dumps(document).encode(), "application/json")
            elif path == "/health/gateway" and gateway is not None:
                self.answer(200, json.dumps(gateway.snapshot()).encode(), "application/json")
            else:
                self.send_error(404, "try /metrics")

        def answer(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # one line per scrape would flood the journal

    return Handler


def beside(agent_config: str, name: str, build: Callable[[str], Any]) -> Any:
    """BUILD(path) of the release's config NAME next to agent.json, or None when the release
    has none or it is bad (one journal line)."""
    import os

    path = os.path.join(os.path.dirname(agent_config), name)
    if not os.path.exists(path):
        return None
    try:
        return build(path)
    except (OSError, ValueError, TypeError) as err:
        print(f"ascendctl-exporter: bad {name}: {err}", file=sys.stderr, flush=True)
        return None


def start_gateway(agent_config: str, stop: threading.Event) -> Any:
    """On the gateway host (its release has gateway.json): the watcher that takes groups
    in maintenance out of the balancer (gateway.py)."""
    from ascendctl_runtime.contract import GatewayConfig
    from ascendctl_runtime.gateway import GatewayWatcher

    watcher = beside(agent_config, layout.GATEWAY_CONFIG,
                     lambda path: GatewayWatcher(GatewayConfig.load(path)))
    if watcher is not None:
        threading.Thread(target=watcher.run_forever, args=(stop,), name="gateway",
                         daemon=True).start()
    return watcher


def start_faults(agent_config: str, agent: Any, stop: threading.Event) -> Any:
    """The fault monitor (faults/monitor.py) when the release has faults.json: it reads the
    node's fault signals and takes the policy's actions (faults/actions.py)."""
    from ascendctl_runtime import engine_state as es
    from ascendctl_runtime.contract import FaultsConfig
    from ascendctl_runtime.faults import actions
    from ascendctl_runtime.faults.monitor import FaultMonitor

    units = agent.config.units
    monitor = beside(agent_config, layout.FAULTS_CONFIG, lambda path: FaultMonitor(
        FaultsConfig.load(path), own_pids=lambda: es.engine_pids(es.read_units(units))))
    if monitor is not None:
        agent.faults = monitor
        threading.Thread(target=actions.run_forever, name="faults", daemon=True,
                         args=(monitor, agent.config.root, agent.config.node,
                               agent.config.cluster, stop)).start()
    return monitor


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="ascendctl_runtime.exporter")
    parser.add_argument("--listen", default=ANY_IPV4, help="the address to bind (:: is "
                        "IPv6 and IPv4, or IPv4 only where the node has no IPv6)")
    parser.add_argument("--port", type=int, default=9101)
    parser.add_argument("--cache-seconds", type=float, default=5.0)
    parser.add_argument("--agent", default=None, help="the release's agent.json: also run "
                        "the node agent")
    args = parser.parse_args(argv)
    reader = npu.CachedReader()
    agent = None
    stop = threading.Event()
    if args.agent:
        from ascendctl_runtime.agent import Agent
        from ascendctl_runtime.contract import AgentConfig

        def table() -> tuple[Any, str]:
            info, error = reader.read(1.0)
            if info is None:
                return None, error
            return [(p.npu_id, p.pid, p.name, p.memory_mb) for p in info.processes], ""

        try:
            agent = Agent(AgentConfig.load(args.agent), npu_table=table)
        except (OSError, ValueError, TypeError) as err:
            print(f"ascendctl-exporter: bad agent config: {err}", file=sys.stderr, flush=True)
            return 2
        threading.Thread(target=agent.run_forever, args=(stop,), name="agent",
                         daemon=True).start()
    gateway = start_gateway(args.agent, stop) if args.agent else None
    if agent is not None:
        start_faults(args.agent, agent, stop)
    server, note = http_server(args.listen, args.port,
                               make_handler(Collector(args.cache_seconds, reader, agent),
                                            gateway))
    if note:
        print(f"ascendctl-exporter: {note}", file=sys.stderr, flush=True)
    print(f"ascendctl-exporter: serving /metrics{' and /health' if agent else ''} on "
          f"{host_port(*bound_address(server))}", file=sys.stderr, flush=True)
    import signal

    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
