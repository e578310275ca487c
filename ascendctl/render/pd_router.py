"""The PD unit's router: vllm-router in its vLLM PD mode, on the unit's first prefill node.

vllm-router (the vLLM project's router, PyPI `vllm-router`) sends each request to a prefill
API server with max_tokens 1, then the original request to a decode API server: the P-first
flow MooncakeConnectorV1, NixlConnector and the storage connectors need (vllm-ascend's
`pd_disaggregation_mooncake_multi_node.md`). It calls its backends with
`Authorization: Bearer $OPENAI_API_KEY` (from the release's 0600 secrets.env), whatever the
client sent. MooncakeLayerwiseConnector needs the D-first flow, which vllm-router does not
have: rendering refuses it (rule pd.proxy-flow explains the flows).

Pure: the same inventory gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ascendctl_runtime import layout
from ascendctl_runtime.nodeutil import http_url

from ascendctl.errors import InputError
from ascendctl.inventory import Host, Inventory
from ascendctl.inventory.pd import role_view, router_host
from ascendctl.render.files import RenderedFile
from ascendctl.render.jinja import render_template
from ascendctl.render.listen import listen_address

D_FIRST = ("MooncakeLayerwiseConnector",)
ROUTER_CHECK_S = 2
def backends(inv: Inventory, unit: str) -> dict[str, str]:
    """{"prefill": URL, "decode": URL}: each side's API server (its DP master)."""
    urls = {}
    for role in ("prefill", "decode"):
        side = role_view(inv, unit, role)
        urls[role] = http_url(side.head.address, side.serving.port)
    return urls


def router_argv(inv: Inventory, unit: str) -> list[str]:
    pd = inv.pd
    assert pd is not None
    if pd.connector in D_FIRST:
        raise InputError(f"{pd.connector} needs the decode-first proxy (vllm-ascend's "
                         "load_balance_proxy_layerwise_server_example.py); ascendctl's router "
                         "(vllm-router) sends prefill first: use MooncakeConnectorV1",
                         file=str(inv.path), line=inv.source.line_of(("all", "vars", "pd",
                                                                      "connector")),
                         field="pd.connector")
    urls = backends(inv, unit)
    host = router_host(inv, unit)
    return [pd.router.executable, "--vllm-pd-disaggregation",
            "--host", listen_address(host), "--port", str(pd.router.port),
            "--prefill", urls["prefill"], "--decode", urls["decode"],
            "--policy", pd.router.policy,
            # the router waits for both sides; they load as long as the engine may
            "--worker-startup-timeout-secs", str(inv.serving.startup_timeout),
            # it looks every 30 s by default: a restarted unit would wait for nothing
            "--worker-startup-check-interval", str(ROUTER_CHECK_S),
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(pd.router.metrics_port),
            *pd.router.extra_args]


def router_files(inv: Inventory, unit: str, host: Host, *, release: str,
                 unit_context: Mapping[str, Any]) -> list[RenderedFile]:
    """The router's unit on UNIT's router host (nothing elsewhere)."""
    if inv.pd is None or host.name != router_host(inv, unit).name:
        return []
    text = render_template("systemd/ascendctl-pd-router.service.j2",
                           argv=router_argv(inv, unit), unit=unit, port=inv.pd.router.port,
                           secrets=inv.serving.api_key is not None, **unit_context)
    return [RenderedFile(layout.unit_file(layout.ROUTER_UNIT), text.encode())]
