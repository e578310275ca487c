"""NPU metrics for Prometheus, named like Huawei's npu-exporter where they overlap.

    python3 -m ascendctl_runtime.exporter [--listen ADDR] [--port 9101] [--cache-seconds 5]

Each scrape reads `npu-smi info` and every RoCE port's link and net health through
hccn_tool (results cached for a few seconds, so several scrapers cost one read).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

from ascendctl.facts.npu_smi import NpuSmiInfo
from ascendctl_runtime import npu

HEALTHY = "OK"


def _labels(**labels: object) -> str:
    def escape(value: object) -> str:
        return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in labels.items()) + "}"


class Metrics:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.declared: set[str] = set()

    def add(self, name: str, help_text: str, value: float, **labels: object) -> None:
        if name not in self.declared:
            self.declared.add(name)
            self.lines.append(f"# HELP {name} {help_text}")
            self.lines.append(f"# TYPE {name} gauge")
        label_text = _labels(**labels) if labels else ""
        self.lines.append(f"{name}{label_text} {value:g}")

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


class Collector:
    def __init__(self, cache_seconds: float):
        self.cache_seconds = cache_seconds
        self.lock = threading.Lock()
        self.cached_at = float("-inf")
        self.cached = ""

    def collect(self) -> str:
        with self.lock:
            if time.monotonic() - self.cached_at < self.cache_seconds:
                return self.cached
            started = time.monotonic()
            info, error = npu.read_npu_info()
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
            return text


def make_handler(collector: Collector):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server API)
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(404, "try /metrics")
                return
            body = collector.collect().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # one line per scrape would flood the journal

    return Handler


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="ascendctl_runtime.exporter")
    parser.add_argument("--listen", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=9101)
    parser.add_argument("--cache-seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    server = ThreadingHTTPServer((args.listen, args.port),
                                 make_handler(Collector(args.cache_seconds)))
    print(f"ascendctl-exporter: serving /metrics on {args.listen}:{args.port}",
          file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
