"""The names both sides of SSH agree on: systemd units, and the files under the deploy root
and inside a release (standard library only). The controller renders and places them, the
node runtime reads them; neither spells one of these names itself.

    <root>/releases/<id>/             one release (content-addressed id)
        engine.json  ray.json         the launcher's config of each engine unit
        engine.env   secrets.env      the units' environment (secrets.env: 0600)
        hccl.json                     the rank table
        watchdog.json agent.json supervisor.json   the health machinery's configs
        gateway.json                  the gateway watcher's config (the gateway host)
        faults.json                   the fault monitor's config and policy table
        units/<unit>                  the unit files, installed by the deploy
        runtime/                      this package and the facts parsers (PYTHONPATH)
        .status  .meta.json           bookkeeping, not part of the content
    <root>/current -> releases/<id>   the serving release
    <root>/history.jsonl              deploy's events
    <root>/supervisor.hold            a deploy (or an operator) holds recovery until a time
    <root>/health/...                 the health machinery's state (healthstore.py)
"""

import os
from typing import Optional

UNIT_PREFIX = "ascendctl-"
ENGINE_UNIT = "ascendctl-engine.service"
RAY_UNIT = "ascendctl-ray.service"
EXPORTER_UNIT = "ascendctl-exporter.service"      # carries the node agent
WATCHDOG_UNIT = "ascendctl-watchdog.service"
SUPERVISOR_UNIT = "ascendctl-supervisor.service"  # the head only
ROUTER_UNIT = "ascendctl-pd-router.service"       # a PD unit's router, on its first prefill node
ENGINE_UNITS = (RAY_UNIT, ENGINE_UNIT, ROUTER_UNIT)   # rank-ordered, in this start order
SIDE_UNITS = (EXPORTER_UNIT, WATCHDOG_UNIT, SUPERVISOR_UNIT)
ALL_UNITS = ENGINE_UNITS + SIDE_UNITS

# the variables of a release's secrets.env (0600)
API_KEY_VAR = "VLLM_API_KEY"                      # vLLM's own name for it
HEALTH_TOKEN_VAR = "ASCENDCTL_HEALTH_TOKEN"       # signs the supervisor's plans
ROUTER_API_KEY_VAR = "OPENAI_API_KEY"             # vllm-router's key for its backends

# inside a release
ENGINE_CONFIG = "engine.json"
RAY_CONFIG = "ray.json"
ENGINE_ENV = "engine.env"
SECRETS_ENV = "secrets.env"
RANK_TABLE = "hccl.json"
WATCHDOG_CONFIG = "watchdog.json"
AGENT_CONFIG = "agent.json"
SUPERVISOR_CONFIG = "supervisor.json"
GATEWAY_CONFIG = "gateway.json"             # the gateway host only
FAULTS_CONFIG = "faults.json"
UNITS_DIR = "units"
RUNTIME_DIR = "runtime"
STATUS_FILE = ".status"
META_FILE = ".meta.json"

# under the deploy root
RELEASES_DIR = "releases"
CURRENT_LINK = "current"
HISTORY_FILE = "history.jsonl"
HOLD_FILE = "supervisor.hold"
HEALTH_DIR = "health"

# under <root>/health/
EVENTS_FILE = "events.jsonl"
PLAN_FILE = "plan.json"
SUPERVISOR_STATE = "supervisor.json"
AGENT_STATE = "agent.json"
RESTART_REQUEST = "restart-request.json"
MAINTENANCE_FILE = "maintenance.json"       # drained or isolated, until undrain
GATEWAY_STATE = "gateway.json"              # the gateway watcher: groups it took out
FAULTS_STATE = "faults-state.json"         # the fault monitor's counters and log offsets
FAULT_EVENTS = "fault-events.json"         # its last events
FAULT_VIEW = "fault-view.json"             # its last reading: signals present, errors


def release_dir(root: str, release_id: str) -> str:
    """`<root>/releases/<release_id>` (ROOT is absolute; a trailing slash is dropped)."""
    return f"{root.rstrip('/')}/{RELEASES_DIR}/{release_id}"


def in_release(release: str, name: str) -> str:
    """File NAME of the release in directory RELEASE."""
    return f"{release}/{name}"


def unit_file(unit: str) -> str:
    """Where a release keeps UNIT's file, relative to the release."""
    return f"{UNITS_DIR}/{unit}"


def current_release(root: str) -> Optional[str]:
    """The id of the serving release (where `<root>/current` points), or None."""
    try:
        return os.path.basename(os.readlink(os.path.join(root, CURRENT_LINK)).rstrip("/"))
    except OSError:
        return None
