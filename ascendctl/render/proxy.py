"""The proxy's nginx site (templates/nginx/ascendctl.conf.j2): one upstream server per
serving group's head, on the gateway host (serving.proxy.gateway, default the first
group's head). A rolling deploy renders it with the group it switches marked `down`, so
nginx sends that group nothing new while its in-flight requests finish.

Pure: the same inventory and drained groups always give the same bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Optional

from ascendctl_runtime.gateway import max_fails
from ascendctl_runtime.nodeutil import host_port

from ascendctl.inventory import Host, Inventory
from ascendctl.inventory.pd import entry_port, role_view
from ascendctl.render.admission import admission
from ascendctl.render.files import RenderedFile
from ascendctl.render.jinja import render_template
from ascendctl.render.listen import serves_ipv6

SITE_DIR = "/etc/nginx/conf.d"
LOCAL = "127.0.0.1"
FAIL_TIMEOUT_S = 10      # a head that refused a connection gets no request for this long
CONNECT_TIMEOUT_S = 5    # a powered-off head must not hold a request up for long
# An idle connection to a head is closed by nginx before the head closes it: vLLM's HTTP
# server closes idle keep-alive connections after 5 s (uvicorn's default; in the lab's vLLM
# VLLM_HTTP_TIMEOUT_KEEP_ALIVE, vllm/envs.py), nginx keeps them 60 s by default, and a
# request nginx sends on one the head is closing at that moment fails (counted against
# the head by max_fails).
UPSTREAM_IDLE_S = 4


@dataclass(frozen=True)
class Upstream:
    group: str
    node: str
    address: str         # host:port as nginx connects to it ([v6]:port for IPv6)
    down: bool = False


def site_path(inv: Inventory) -> str:
    """Where the site lives on the gateway (nginx reads conf.d/*.conf in http{})."""
    return f"{SITE_DIR}/ascendctl-{inv.cluster.name}.conf"


# nginx keeps variable names in a hash of 64-byte buckets by default
# (variables_hash_bucket_size): a name longer than about 46 bytes makes `nginx -t` fail
VARIABLE_IDENT_MAX = 16


def ident(inv: Inventory) -> str:
    return inv.cluster.name.replace("-", "_").replace(".", "_")


def variable_ident(inv: Inventory) -> str:
    """The cluster in the site's variable names: short enough for nginx's default hash
    buckets, still one per cluster (a long name: its start and a digest of it)."""
    name = ident(inv)
    if len(name) <= VARIABLE_IDENT_MAX:
        return name
    digest = hashlib.sha256(inv.cluster.name.encode()).hexdigest()[:8]
    return f"{name[:VARIABLE_IDENT_MAX - 9]}_{digest}"


def _reached(inv: Inventory, group: str, host: Host, port: int, down: bool = False) -> Upstream:
    """HOST:PORT as nginx on the gateway reaches it (loopback on the gateway itself)."""
    gateway = inv.gateway
    address = LOCAL if gateway is not None and host.name == gateway.name else host.address
    return Upstream(group, host.name, host_port(address, port), down=down)


def upstreams(inv: Inventory, drained: Iterable[str] = ()) -> list[Upstream]:
    """Each serving group's head as nginx on the gateway reaches it."""
    down = set(drained)
    return [_reached(inv, group.name, inv.host(group.head), entry_port(inv),
                     down=group.name in down) for group in inv.serving_groups]


def key_checkers(inv: Inventory) -> list[Upstream]:
    """In a PD inventory with an API key, each unit's prefill API server: the router calls
    its backends with its own key whatever the client sent, so the gateway asks a prefill
    engine's own API-key check (/v1/models) about the client's key first (auth_request)."""
    if inv.pd is None or inv.serving.api_key is None:
        return []
    sides = [role_view(inv, group.name, "prefill") for group in inv.serving_groups]
    return [_reached(inv, side.serving_groups[0].name, side.head, side.serving.port)
            for side in sides]


def render_site(inv: Inventory, drained: Iterable[str] = (),
                envelope: Optional[int] = None) -> bytes:
    """The site, with the groups in DRAINED marked down (never all of them: a group that
    is the only one left keeps taking traffic). With slo.promotion.envelope enabled and
    the release's ENVELOPE known (per group), it admits a share of it per group in the
    balancer (render/admission.py)."""
    servers = upstreams(inv, drained)
    live = sum(not u.down for u in servers)
    if not live:
        raise ValueError("internal: every serving group would be out of the balancer")
    s = inv.serving
    gateway = inv.gateway
    return render_template(
        "nginx/ascendctl.conf.j2", cluster=inv.cluster.name, ident=ident(inv),
        var=variable_ident(inv), servers=servers, listen_port=s.proxy.port,
        listen_ipv6=gateway is not None and serves_ipv6(gateway), fail_timeout=FAIL_TIMEOUT_S,
        connect_timeout=CONNECT_TIMEOUT_S, key_checkers=key_checkers(inv),
        max_fails=max_fails(live), upstream_idle=UPSTREAM_IDLE_S,
        stream_timeout=max(3600, s.startup_timeout),
        admission=admission(inv, envelope, live)).encode()


def site_file(inv: Inventory, drained: Iterable[str] = (),
              envelope: Optional[int] = None) -> RenderedFile:
    return RenderedFile("nginx/ascendctl.conf", render_site(inv, drained, envelope))
