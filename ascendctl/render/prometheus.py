"""The Prometheus scrape config and alert rules for a cluster (templates/prometheus/).

The scrape config reads every node's exporter (NPU metrics, the rank's engine state, and on
the head the gang supervisor's deep-probe verdict) and the head engine's own /metrics. The
rules alert on what an operator must act on: serving down or degraded, a rank restarting
in a loop, recovery that gave up, HBM held by a process that is not the engine, KV cache
near full, an unhealthy NPU, a RoCE link down (docs/health.md).
"""

from __future__ import annotations

from ascendctl_runtime.nodeutil import host_port

from ascendctl.inventory import Inventory
from ascendctl.render.files import RenderedFile
from ascendctl.render.jinja import render_template

RULES_FILE = "ascendctl-rules.yml"
KV_CACHE_THRESHOLD = 0.95
RESTART_LOOP_STARTS = 3        # engine starts of one rank within RESTART_LOOP_WINDOW
RESTART_LOOP_WINDOW = "30m"


def prometheus_files(inv: Inventory, *, scrape_interval: str = "15s",
                     evaluation_interval: str = "15s") -> list[RenderedFile]:
    s = inv.serving
    config = render_template(
        "prometheus/prometheus.yml.j2", cluster=inv.cluster.name, rules_file=RULES_FILE,
        scrape_interval=scrape_interval, evaluation_interval=evaluation_interval,
        engine_targets=[{"address": host_port(h.address, s.port), "node": h.name,
                         "group": h.serving_group} for h in inv.heads],
        exporter_targets=[{"address": host_port(h.address, inv.deploy.exporter_port),
                           "node": h.name, "rank": str(h.rank), "group": h.serving_group}
                          for h in inv.hosts])
    ttft = inv.slo.max_p99_ttft_ms
    rules = render_template(
        "prometheus/alerts.yml.j2", cluster=inv.cluster.name, replicated=inv.replicated,
        hbm_threshold=s.hbm_watchdog_threshold, kv_threshold=KV_CACHE_THRESHOLD,
        queue_threshold=s.max_num_seqs * s.data_parallel_size,
        restart_loop_starts=RESTART_LOOP_STARTS, restart_loop_window=RESTART_LOOP_WINDOW,
        ttft_slo_s=None if ttft is None else round(ttft / 1000, 6),
        ttft_slo_ms=ttft if ttft is None else format(ttft, "g"))
    return [RenderedFile("prometheus/prometheus.yml", config.encode()),
            RenderedFile(f"prometheus/{RULES_FILE}", rules.encode())]
