"""Render a release: every file each node needs, and the cluster-level files.

Pure: takes the inventory (plus values discovered on the nodes and secrets the caller
resolved) and returns bytes. The same input always gives byte-identical output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ascendctl_runtime import layout
from ascendctl_runtime.contract import LaunchConfig, WatchdogConfig
from ascendctl_runtime.layout import ENGINE_UNIT, EXPORTER_UNIT, RAY_UNIT, WATCHDOG_UNIT
from ascendctl_runtime.nodeutil import http_url

from ascendctl.engine.identity import EngineIdentity
from ascendctl.engine.kinds import kind_of
from ascendctl.errors import InputError
from ascendctl.inventory import Host, Inventory
from ascendctl.inventory.pd import gang_view, is_router_host, launch_views
from ascendctl.plan.inventory_plan import resolve_model_config
from ascendctl.render import faults, health, pd_router, prometheus, proxy, timeouts
from ascendctl.render.engine import (
    data_parallel_ranks, engine_argv, engine_environment, ray_argv,
)
from ascendctl.render.envfile import format_env_file
from ascendctl.render.files import REDACTED, RenderedFile, release_dir
from ascendctl.render.jinja import render_template
from ascendctl.render.listen import listen_address
from ascendctl.render.ranktable import build_rank_table, rank_table_json

WATCHDOG_INTERVAL_S = 5
WATCHDOG_CONSECUTIVE = 3


def detect_checkpoint_dtype(inv: Inventory) -> str | None:
    """The dtype the checkpoint declares, when its config is at hand (decides --dtype)."""
    try:
        return resolve_model_config(inv).torch_dtype
    except InputError:
        return None


def _launcher_config(inv: Inventory, host: Host, release: str, release_id: str,
                     argv: list[str], *, kind: str, headless: bool) -> RenderedFile:
    s = inv.serving
    engine = kind == "engine"
    config = LaunchConfig(
        kind="engine" if engine else "ray", argv=argv,
        env_file=layout.in_release(release, layout.ENGINE_ENV),
        secrets_file=layout.in_release(release, layout.SECRETS_ENV)
        if s.api_key is not None else None,
        cluster=inv.cluster.name, node=host.name, rank=host.rank, headless=headless,
        mode=s.mode, release=release_id, release_dir=release, cpus=host.cpus,
        numa_node=host.numa_node, startup_timeout_s=s.startup_timeout,
        stop_grace_seconds=timeouts.STOP_GRACE_S,
        data_parallel_ranks=list(data_parallel_ranks(inv)[host.name])
        if engine and s.mode == "dp" else None,
        ready_url=http_url("127.0.0.1", s.port, "/v1/models") if engine and host.is_head
        else None)
    return RenderedFile(layout.ENGINE_CONFIG if engine else layout.RAY_CONFIG,
                        config.to_json().encode())


def _watchdog_config(inv: Inventory, restarted: str) -> RenderedFile:
    s = inv.serving
    config = WatchdogConfig(
        unit=restarted, threshold=s.hbm_watchdog_threshold,
        interval_seconds=WATCHDOG_INTERVAL_S, consecutive=WATCHDOG_CONSECUTIVE,
        # HBM climbs to the KV budget while the engine starts: never act before then
        startup_grace_seconds=s.startup_timeout,
        cooldown_seconds=s.startup_timeout + timeouts.STOP_GRACE_S,
        # it asks the gang supervisor for a restart, never restarts the unit alone
        request_file=health.watchdog_request_file(inv))
    return RenderedFile(layout.WATCHDOG_CONFIG, config.to_json().encode())


def preview_identity(inv: Inventory) -> EngineIdentity:
    """The engine identity when the caller has none (`ascendctl render`, tests): what
    the engine's kind reads on this machine (an archive's image ID, a wheelhouse's venv),
    else the image reference as it is (a deploy asks the nodes for its ID)."""
    return kind_of(inv.engine).preview_identity(inv)


def _engine_unit(inv: Inventory, release: str, argv: list[str],
                 env: list[tuple[str, str]], engine: EngineIdentity, *, headless: bool,
                 unit_context: Mapping[str, Any]) -> tuple[list[str], str]:
    """engine.json's argv and the engine unit, as the engine's kind launches it."""
    secrets_file = f"{release}/{layout.SECRETS_ENV}" if inv.serving.api_key is not None else None
    launch = kind_of(inv.engine).launch(inv, release=release, argv=argv,
                                        env_names=[name for name, _ in env],
                                        identity=engine, secrets_file=secrets_file)
    return launch.argv, render_template(launch.unit_template, headless=headless,
                                        **launch.unit_fields, **unit_context)


def render_node(inv: Inventory, host: Host, *, release_id: str,
                secrets: Mapping[str, str] | None = None, nic: str | None = None,
                rank_table: bytes, checkpoint_dtype: str | None,
                engine: EngineIdentity | None = None,
                gateway_state_url: str | None = None,
                serving_groups: int = 1,
                gang: Inventory | None = None) -> list[RenderedFile]:
    """HOST's release files. INV launches HOST (a serving group, or in PD one side of a
    unit); GANG is the group its supervisor keeps (in PD the whole unit; default INV)."""
    s = inv.serving
    release = release_dir(inv.deploy.root, release_id)
    files: list[RenderedFile] = []
    unit_context = {
        "cluster": inv.cluster.name, "release_id": release_id, "release": release,
        "host": host, "python": inv.deploy.python, "startup_timeout": s.startup_timeout,
        "stop_grace": timeouts.STOP_GRACE_S, "restart_sec": timeouts.RESTART_SEC,
        "start_limit_burst": timeouts.START_LIMIT_BURST,
        "start_limit_interval": timeouts.start_limit_interval_s(inv),
        "layout": layout,        # unit and file names (ascendctl_runtime/layout.py)
    }

    env = engine_environment(inv, host, release, nic=nic)
    files.append(RenderedFile(layout.ENGINE_ENV, format_env_file(
        env, f"ascendctl engine environment for {host.name} (release {release_id})").encode()))
    secret_values = []
    if s.api_key is not None:
        value = (secrets or {}).get("api_key")
        secret_values.append((layout.API_KEY_VAR, value if value is not None else REDACTED))
        if gang is not None and is_router_host(gang, gang.host(host.name)):
            secret_values.append((layout.ROUTER_API_KEY_VAR,
                                  value if value is not None else REDACTED))
    token = health.plan_token(inv, secrets)
    if token is not None:
        secret_values.append((health.TOKEN_KEY, token))
    if secret_values:
        text = format_env_file(secret_values, "ascendctl secrets: mode 0600, never logged")
        files.append(RenderedFile(layout.SECRETS_ENV, text.encode(), 0o600, secret=True))
    files.append(RenderedFile(layout.RANK_TABLE, rank_table))

    argv = engine_argv(inv, host, release, checkpoint_dtype=checkpoint_dtype)
    headless = argv is not None and "--headless" in argv
    restarted = ENGINE_UNIT
    if argv is not None:
        launch, unit = _engine_unit(inv, release, argv, env, engine or preview_identity(inv),
                                    headless=headless, unit_context=unit_context)
        files.append(_launcher_config(inv, host, release, release_id, launch, kind="engine",
                                      headless=headless))
        files.append(RenderedFile(layout.unit_file(ENGINE_UNIT), unit.encode()))
    ray = ray_argv(inv, host)
    if ray is not None:
        ray = kind_of(inv.engine).ray_argv(inv, engine or preview_identity(inv), ray)
        files.append(_launcher_config(inv, host, release, release_id, ray, kind="ray",
                                      headless=False))
        files.append(RenderedFile(layout.unit_file(RAY_UNIT), render_template(
            "systemd/ascendctl-ray.service.j2", **unit_context).encode()))
        if argv is None:
            restarted = RAY_UNIT

    files.append(RenderedFile(layout.unit_file(EXPORTER_UNIT), render_template(
        "systemd/ascendctl-exporter.service.j2", port=inv.deploy.exporter_port,
        exporter_argv=health.exporter_argv(inv, release, listen_address(host)),
        **unit_context).encode()))
    files += health.health_files(inv, host, release=release, release_id=release_id,
                                 unit_context=unit_context,
                                 gateway_state_url=gateway_state_url, gang=gang)
    if gang is not None:
        files += pd_router.router_files(gang, host.serving_group, gang.host(host.name),
                                        release=release, unit_context=unit_context)

    files.append(faults.faults_config(inv, host, serving_groups=serving_groups))
    files.append(_watchdog_config(inv, restarted))
    files.append(RenderedFile(layout.unit_file(WATCHDOG_UNIT), render_template(
        "systemd/ascendctl-watchdog.service.j2", unit=restarted,
        threshold_pct=round(s.hbm_watchdog_threshold * 100, 1), **unit_context).encode()))
    return sorted(files, key=lambda f: f.path)


def render_release(inv: Inventory, *, release_id: str,
                   secrets: Mapping[str, str] | None = None,
                   nics: Mapping[str, str] | None = None,
                   device_ips: Mapping[str, Sequence[str]] | None = None,
                   checkpoint_dtype: Any = ...,
                   engine: EngineIdentity | None = None,
                   ) -> dict[str, list[RenderedFile]]:
    """Every node's release files, keyed by host name (serving group, then rank order).

    `secrets`: {"api_key": value, "health_token": value} resolved by the caller (each
    optional); without them secrets.env holds placeholders. `nics` / `device_ips`: values discovered on the nodes for hosts whose
    inventory leaves them out. `checkpoint_dtype`: the checkpoint's torch_dtype (None =
    unknown, always pass --dtype); by default read from the model config when at hand.
    `engine`: the release's engine identity (image ID or venv); by default read from the
    archive or wheelhouse (`preview_identity`). Raises InputError for incoherent timeouts."""
    timeouts.check_timeouts(inv)
    dtype = detect_checkpoint_dtype(inv) if checkpoint_dtype is ... else checkpoint_dtype
    engine = engine or preview_identity(inv)
    rendered: dict[str, list[RenderedFile]] = {}
    gateway_url = health.gateway_state_url(inv) if inv.pd is None else None
    for view in launch_views(inv):
        # each serving group (in PD, each side of one): its own rank table, head
        # address, supervisor
        table = rank_table_json(build_rank_table(view, device_ips=device_ips))
        for host in view.hosts:
            rendered[host.name] = render_node(view, host, release_id=release_id,
                                              secrets=secrets,
                                              nic=(nics or {}).get(host.name),
                                              rank_table=table, checkpoint_dtype=dtype,
                                              engine=engine, gateway_state_url=gateway_url,
                                              serving_groups=len(inv.serving_groups),
                                              gang=gang_view(inv, host.serving_group)
                                              if inv.pd is not None else None)
    gateway = inv.gateway
    watcher = health.gateway_config(inv, proxy.site_path(inv)) if gateway_url else None
    if gateway is not None and watcher is not None and gateway.name in rendered:
        rendered[gateway.name] = sorted(rendered[gateway.name] + [watcher],
                                        key=lambda f: f.path)
    return rendered


def render_cluster(inv: Inventory) -> list[RenderedFile]:
    """Cluster-level files: the gateway's nginx site (every serving group in the balancer)
    and the Prometheus config and rules."""
    files = []
    if inv.serving.proxy.enabled:
        files.append(proxy.site_file(inv))
    files += prometheus.prometheus_files(inv)
    return files


def render_warnings(inv: Inventory) -> list[str]:
    return timeouts.check_timeouts(inv) + health.warnings(inv)
