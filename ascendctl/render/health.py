"""The health machinery a release carries (docs/health.md): every node's agent config,
the head's supervisor config and unit, the exporter's command line (the agent runs inside
the exporter), the watchdog's request file, and the plan-signing token for secrets.env.

Pure: the same inventory (and secrets) always gives the same bytes.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import Any, Optional

from ascendctl_runtime import gangrules, layout
from ascendctl_runtime.contract import (
    AgentConfig, GatewayConfig, GatewayGroup, RankSpec, SupervisorConfig,
)
from ascendctl_runtime.layout import ENGINE_UNIT, RAY_UNIT, ROUTER_UNIT, SUPERVISOR_UNIT
from ascendctl_runtime.nodeutil import http_url

from ascendctl.inventory import Host, Inventory
from ascendctl.inventory.pd import entry_port, is_router_host
from ascendctl.render.files import REDACTED, RenderedFile
from ascendctl.render.jinja import render_template

TOKEN_KEY = layout.HEALTH_TOKEN_VAR
AGENT_INTERVAL_S = 2.0
SUPERVISOR_TICK_S = 2.0
PLAN_TTL_S = 30.0
STATE_TIMEOUT_S = 3.0
# Without an API key or serving.health.token there is no secret to sign plans with.
UNAUTHENTICATED_KEY = b"ascendctl-health-no-secret"


def node_engine_units(inv: Inventory, host: Host) -> list[str]:
    """The engine units of a node in start order (as ascendctl/render/engine.py decides
    who runs what: Ray on every node in ray mode, the engine everywhere else and on the
    ray head)."""
    units = []
    if inv.serving.mode == "ray":
        units.append(RAY_UNIT)
    if inv.serving.mode != "ray" or host.is_head:
        units.append(ENGINE_UNIT)
    if is_router_host(inv, host):
        units.append(ROUTER_UNIT)
    return units


def coordination_port(inv: Inventory) -> Optional[int]:
    """The port the head of INV's serving group (a group view) listens on for its
    followers (gangrules.py: the deploy and the supervisor wait for it)."""
    s = inv.serving
    return gangrules.coordination_port(s.mode, len(inv.hosts), master_port=s.master_port,
                                       data_parallel_rpc_port=s.data_parallel_rpc_port,
                                       ray_port=s.ray_port)


def plan_token(inv: Inventory, secrets: Mapping[str, str] | None) -> Optional[str]:
    """The token that signs the supervisor's plan (None when not supervising): the
    inventory's serving.health.token, else derived from the API key, else (no secret at
    all) derived from the cluster name — then plans are not really authenticated and
    render_warnings says so. A placeholder when secrets were not resolved."""
    if not inv.serving.health.supervise:
        return None
    if secrets is None:
        return REDACTED
    if secrets.get("health_token"):
        return secrets["health_token"]
    key = secrets["api_key"].encode() if secrets.get("api_key") else UNAUTHENTICATED_KEY
    return hmac.new(key, f"ascendctl-health-plan/{inv.cluster.name}".encode(),
                    hashlib.sha256).hexdigest()


def warnings(inv: Inventory) -> list[str]:
    h = inv.serving.health
    found = []
    if h.supervise and h.token is None and inv.serving.api_key is None:
        found.append("neither serving.api_key nor serving.health.token is set: the gang "
                     "supervisor's plans are signed with a key derived from the cluster "
                     "name only (not authenticated)")
    if not h.supervise:
        found.append("serving.health.supervise is false: a rank that dies is not restarted "
                     "(engine units never restart on their own)")
    return found


def agent_url(inv: Inventory, host: Host, path: str) -> str:
    return http_url(host.address, inv.deploy.exporter_port, path)


def exporter_argv(inv: Inventory, release: str, listen: str) -> list[str]:
    return [inv.deploy.python, "-m", "ascendctl_runtime.exporter", "--listen", listen,
            "--port", str(inv.deploy.exporter_port),
            "--agent", layout.in_release(release, layout.AGENT_CONFIG)]


def agent_config(inv: Inventory, host: Host, release: str, release_id: str,
                 gang: Optional[Inventory] = None) -> AgentConfig:
    """HOST's agent. INV launches HOST (in PD, its side); GANG is the group its supervisor
    keeps (in PD, the whole unit; by default INV)."""
    gang = gang or inv
    member = gang.host(host.name)
    return AgentConfig(
        cluster=inv.cluster.name, node=host.name, rank=member.rank, release=release_id,
        root=inv.deploy.root, units=node_engine_units(gang, member),
        plan_url=agent_url(gang, gang.head, "/health/plan"),
        secrets_file=layout.in_release(release, layout.SECRETS_ENV),
        coordination_port=coordination_port(inv) if host.is_head else None,
        is_head=member.is_head, interval_s=AGENT_INTERVAL_S,
        stop_grace_s=float(inv.serving.health.stop_grace_s), plan_ttl_s=PLAN_TTL_S,
        npu_cache_s=3.0)


def supervisor_config(inv: Inventory, release: str, release_id: str,
                      gateway_state_url: Optional[str] = None,
                      drain_timeout_s: float = 60.0) -> SupervisorConfig:
    s, h = inv.serving, inv.serving.health
    return SupervisorConfig(
        cluster=inv.cluster.name, release=release_id, root=inv.deploy.root,
        ranks=[RankSpec(node=host.name, rank=host.rank,
                        state_url=agent_url(inv, host, "/health/state"),
                        units=tuple(node_engine_units(inv, host))) for host in inv.hosts],
        steps=gang_steps(inv),
        probe_port=entry_port(inv),
        probe_model=inv.model.served_name or f"{release}/model",
        secrets_file=layout.in_release(release, layout.SECRETS_ENV),
        head_node=inv.head.name,
        probe_interval_s=float(h.probe_interval_s),
        probe_timeout_s=float(h.probe_timeout_s),
        probe_failure_s=float(h.probe_failure_s),
        startup_timeout_s=float(s.startup_timeout),
        rank_start_wait_s=float(gangrules.RANK_START_WAIT_S),
        settle_s=gangrules.SETTLE_S,
        max_attempts=h.max_attempts,
        backoff_s=float(h.backoff_s),
        backoff_max_s=float(h.backoff_max_s),
        # the agents' SIGTERM grace and SIGKILL grace, and a margin for slow systemctl
        stop_timeout_s=float(2 * h.stop_grace_s + 30),
        npu_free_timeout_s=float(h.npu_free_timeout_s),
        stable_s=float(h.stable_s),
        tick_s=SUPERVISOR_TICK_S,
        state_timeout_s=STATE_TIMEOUT_S,
        group=inv.serving_groups[0].name if inv.serving_groups else "",
        gateway_state_url=gateway_state_url,
        drain_timeout_s=drain_timeout_s)


def gang_steps(gang: Inventory) -> list[tuple[str, str]]:
    """(node, unit) in start order: every rank's engine units in rank order, then a PD
    unit's router (once both sides run: it waits for their API servers)."""
    steps = [(host.name, unit) for host in gang.hosts for unit in node_engine_units(gang, host)]
    return [s for s in steps if s[1] != ROUTER_UNIT] + [s for s in steps if s[1] == ROUTER_UNIT]


def health_files(inv: Inventory, host: Host, *, release: str, release_id: str,
                 unit_context: Mapping[str, Any], gateway_state_url: Optional[str] = None,
                 gang: Optional[Inventory] = None) -> list[RenderedFile]:
    """HOST's agent config, and on the gang's head its supervisor. INV launches HOST (in
    PD, its side); GANG is what the supervisor keeps (in PD, the unit; default INV)."""
    gang = gang or inv
    agent = agent_config(inv, host, release, release_id, gang)
    files = [RenderedFile(layout.AGENT_CONFIG, agent.to_json().encode())]
    if gang.head.name == host.name and inv.serving.health.supervise:
        supervisor = supervisor_config(gang, release, release_id, gateway_state_url,
                                       float(inv.deploy.rolling.drain_timeout))
        files.append(RenderedFile(layout.SUPERVISOR_CONFIG, supervisor.to_json().encode()))
        files.append(RenderedFile(layout.unit_file(SUPERVISOR_UNIT), render_template(
            "systemd/ascendctl-supervisor.service.j2", nodes=len(gang.hosts),
            **unit_context).encode()))
    return files


def gateway_state_url(inv: Inventory) -> Optional[str]:
    """The gateway watcher's /health/gateway, when groups are balanced behind a gateway."""
    gateway = inv.gateway
    if gateway is None or not inv.replicated:
        return None
    return agent_url(inv, gateway, "/health/gateway")


def gateway_config(inv: Inventory, site_path: str) -> Optional[RenderedFile]:
    """gateway.json for the gateway host: every group's head and nodes, as the watcher
    polls them (gateway.py). None without a gateway or with one group (nowhere to send
    the traffic of a group in maintenance)."""
    if gateway_state_url(inv) is None:
        return None
    groups = []
    for group in inv.serving_groups:
        hosts = [inv.host(name) for name in group.hosts]
        head = inv.host(group.head)
        groups.append(GatewayGroup(
            name=group.name, health_url=http_url(head.address, entry_port(inv), "/health"),
            nodes=tuple(h.name for h in hosts),
            state_urls=tuple(agent_url(inv, h, "/health/state") for h in hosts)))
    config = GatewayConfig(cluster=inv.cluster.name, root=inv.deploy.root,
                           site_path=site_path, groups=groups)
    return RenderedFile(layout.GATEWAY_CONFIG, config.to_json().encode())


def watchdog_request_file(inv: Inventory) -> str:
    return f"{inv.deploy.root}/{layout.HEALTH_DIR}/{layout.RESTART_REQUEST}"
