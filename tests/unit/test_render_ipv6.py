"""IPv6 hosts wherever an address meets a port: the one helper (ascendctl_runtime.nodeutil
host_port / http_url), and a release, nginx site and Prometheus config rendered for IPv6
hosts, checked by the real tools: `nginx -t`, nginx proxying to an upstream on [::1],
`promtool check config`, Prometheus scraping targets on [::1], urllib, `ssh -G`.

2001:db8::/32 is for documentation: those addresses are written into files and parsed,
never connected to. Everything that connects goes to loopback (::1, 127.0.0.1)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import textwrap
import threading
import time
import urllib.parse
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from ascendctl_runtime import probe
from ascendctl_runtime.nodeutil import host_port, http_url

from ascendctl.load import load_inventory
from ascendctl.render import render_cluster, render_release, write_files
from ascendctl.render.prometheus import prometheus_files
from ascendctl.render.proxy import render_site
from tests.unit.nginx_run import running_nginx
from tests.unit.test_render_validators import tool
from tests.unit.test_replicas import nginx_t
from tests.conftest import free_port


def doc(index: int) -> str:
    """Host INDEX's documentation address (canonical form, none a prefix of another)."""
    return f"2001:db8:{index + 1}::a"


# -- the helper ------------------------------------------------------------------------

@pytest.mark.parametrize("host, joined", [
    ("2001:db8::1", "[2001:db8::1]:8000"),
    ("::1", "[::1]:8000"),
    ("198.18.0.1", "198.18.0.1:8000"),
    ("node0", "node0:8000"),
    ("node0.cluster.example.", "node0.cluster.example.:8000"),
    ("fe80::1%eth0", "[fe80::1%eth0]:8000"),
])
def test_host_port_brackets_ipv6_only(host, joined):
    assert host_port(host, 8000) == joined
    assert host_port(host, "8000") == joined
    assert http_url(host, 8000, "/v1/models") == f"http://{joined}/v1/models"
    # the URL reads back as the same host and port with the standard parser
    parts = urllib.parse.urlsplit(http_url(host, 8000, "/metrics"))
    assert (parts.hostname, parts.port, parts.path) == (host.lower(), 8000, "/metrics")


def test_an_unbracketed_ipv6_url_does_not_read_back():
    # what the renderers wrote before: the parser takes the address's tail for a port
    with pytest.raises(ValueError):
        _ = urllib.parse.urlsplit("http://2001:db8::1:8000/v1").port


@pytest.mark.parametrize("host, port", [
    ("[2001:db8::1]", 8000), ("[::1", 80), ("", 80), ("node0", 0), ("node0", 65536),
    ("node0", "http"),
])
def test_host_port_refuses_what_it_cannot_join(host, port):
    with pytest.raises(ValueError):
        host_port(host, port)


def test_http_url_refuses_a_relative_path():
    assert http_url("node0", 80) == "http://node0:80"
    with pytest.raises(ValueError):
        http_url("node0", 80, "v1/models")


# -- a server on the IPv6 loopback ------------------------------------------------------

class LoopbackV6(ThreadingHTTPServer):
    address_family = socket.AF_INET6
    daemon_threads = True


class Handler(BaseHTTPRequestHandler):
    seen: list[tuple[str, str]] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        Handler.seen.append((self.client_address[0], self.path))
        if self.path == "/v1/models":
            body, kind = json.dumps({"data": [{"id": "tiny"}]}).encode(), "application/json"
        else:
            body, kind = b"# TYPE ascendctl_test_up gauge\nascendctl_test_up 1\n", "text/plain"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def v6_server() -> Iterator[int]:
    """An HTTP server on [::1]: its port."""
    server = LoopbackV6(("::1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Handler.seen.clear()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_the_node_probe_reaches_an_engine_on_ipv6_loopback(v6_server):
    engine = probe.Engine("::1", v6_server, None, 5.0)
    assert engine.base == f"http://[::1]:{v6_server}"
    status, body = engine.request("GET", "/v1/models")
    assert status == 200 and body["data"][0]["id"] == "tiny"
    assert Handler.seen == [("::1", "/v1/models")]


# -- inventories of IPv6 hosts ----------------------------------------------------------

def v6_inventory(tmp_path: Path, addresses: list[list[str]], *, serving: str = "",
                 deploy: str = "", gateway: str | None = None, proxy_port: int | None = None):
    """Serving groups g0, g1, ... of the given ansible_host addresses (ip: IPv4, HCCL's);
    SERVING and DEPLOY: more `, key: value` of those sections."""
    lines = []
    index = 0
    for g, group in enumerate(addresses):
        lines.append(f"        g{g}:\n          vars: {{serving_group: true}}\n          hosts:")
        for rank, address in enumerate(group):
            lines.append(f'            n{index}: {{ansible_host: "{address}", rank: {rank}, '
                         f"ip: 198.18.250.{10 + index}, nic: eth0, "
                         f"device_ips: [198.19.250.{10 + index}]}}")
            index += 1
    proxy = ("{enabled: true" + (f", gateway: {gateway}" if gateway else "") +
             (f", port: {proxy_port}" if proxy_port else "") + "}")
    per_group = len(addresses[0])
    text = textwrap.dedent(f"""
        all:
          vars:
            cluster: {{name: v6, npus_per_node: 1}}
            model: {{path: /srv/m, served_name: tiny}}
            serving: {{mode: mp, pipeline_parallel_size: {per_group}, proxy: {proxy}{serving}}}
            deploy: {{root: {tmp_path}/deploy{deploy}}}
            ssh: {{connect_timeout: 2, connect_retries: 0, known_hosts: {tmp_path}/kh}}
          children:
            nodes:
              children:
        """).lstrip("\n") + "\n".join(lines) + "\n"
    path = tmp_path / "inv.yaml"
    path.write_text(text)
    return load_inventory(path, check_files=False)


def unbracketed(address: str, text: str) -> list[str]:
    """Where ADDRESS is followed by `:port` without brackets (ambiguous for every parser)."""
    return re.findall(r"(?<![\[0-9A-Fa-f:])" + re.escape(address) + r":\d+", text)


def test_every_rendered_file_brackets_ipv6_before_a_port(tmp_path):
    addresses = [[doc(i) for i in range(2)], [doc(i) for i in range(2, 4)]]
    inv = v6_inventory(tmp_path, addresses, gateway="n1")
    nodes = render_release(inv, release_id="r1", secrets={"api_key": "k"})
    texts = {f"{node}/{f.path}": f.content.decode() for node, files in nodes.items()
             for f in files}
    texts.update({f"cluster/{f.path}": f.content.decode() for f in render_cluster(inv)})
    for address in (a for group in addresses for a in group):
        for name, text in texts.items():
            assert unbracketed(address, text) == [], name
    heads = {"g0": doc(0), "g1": doc(2)}
    agent = json.loads(texts["n3/agent.json"])
    assert agent["plan_url"] == f"http://[{heads['g1']}]:9101/health/plan"
    supervisor = json.loads(texts["n0/supervisor.json"])
    assert [r["state_url"] for r in supervisor["ranks"]] == \
        [f"http://[{doc(i)}]:9101/health/state" for i in range(2)]
    assert json.loads(texts["n0/engine.json"])["ready_url"] == "http://127.0.0.1:8000/v1/models"
    # the engine's own addresses stay bare IPv4 (HCCL_IF_IP, --master-addr)
    argv = json.loads(texts["n3/engine.json"])["argv"]
    assert argv[argv.index("--master-addr") + 1] == "198.18.250.12"


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_nodes_addressed_by_ipv6_listen_dual_stack_the_others_on_ipv4(tmp_path):
    """The engine (vLLM's --host: `::` makes it bind an AF_INET6 socket, dual-stack) and
    the exporter with the node agent (--listen) of each node, by the node's own address."""
    inv = v6_inventory(tmp_path, [[doc(0), "198.18.250.2"], ["198.18.250.3", doc(3)]])
    nodes = render_release(inv, release_id="r1", secrets={"api_key": "k"})
    wanted = {"n0": "::", "n1": "0.0.0.0", "n2": "0.0.0.0", "n3": "::"}
    for node, address in wanted.items():
        files = {f.path: f.content.decode() for f in nodes[node]}
        argv = json.loads(files["engine.json"])["argv"]
        assert option(argv, "--host") == address, node
        exporter = files["units/ascendctl-exporter.service"]
        execstart = next(x for x in exporter.splitlines() if x.startswith("ExecStart="))
        assert f" --listen {address} --port 9101 " in execstart, node
    # a head's own probes stay on IPv4 loopback: dual-stack `::` answers there
    head = json.loads({f.path: f.content for f in nodes["n0"]}["engine.json"])
    assert head["ready_url"] == "http://127.0.0.1:8000/v1/models"


def test_the_site_for_ipv6_heads_passes_nginx_t(tmp_path):
    inv = v6_inventory(tmp_path, [[doc(0), doc(1)],
                                  [doc(2), doc(3)]], gateway="n1")
    site = render_site(inv, drained={"g1"}).decode()
    servers = [line.split()[1] for line in site.splitlines()
               if line.strip().startswith("server ") and "max_fails" in line]
    assert servers == [f"[{doc(0)}]:8000", f"[{doc(2)}]:8000"]
    nginx_t(tmp_path / "nginx", site)
    # control: the unbracketed form the renderer used to write fails the same check
    broken = site.replace(f"[{doc(0)}]:8000", f"{doc(0)}:8000")
    with pytest.raises(AssertionError):
        nginx_t(tmp_path / "nginx-broken", broken)


def test_nginx_on_an_ipv6_gateway_answers_both_families_and_proxies_to_ipv6(tmp_path,
                                                                            v6_server):
    """The rendered site, run as it is by the real nginx: clients reach the gateway on
    IPv4 and on IPv6 (its two `listen` sockets coexist on one port), and it passes each
    request to the head at [::1]. Connections go to loopback only."""
    listen = free_port()
    inv = v6_inventory(tmp_path, [["::1", doc(1)]], gateway="n1", proxy_port=listen,
                       serving=f", port: {v6_server}")
    site = render_site(inv).decode()
    assert f"server [::1]:{v6_server} " in site
    assert listen_lines(site) == [str(listen), f"[::]:{listen}"]
    answers = {}
    with running_nginx(tmp_path / "nginx", site) as nginx:
        for client in ("127.0.0.1", "::1"):
            deadline = time.monotonic() + 20
            while client not in answers and time.monotonic() < deadline:
                try:
                    with urllib.request.urlopen(http_url(client, listen, "/v1/models"),
                                                timeout=5) as response:
                        answers[client] = json.load(response)
                except OSError:
                    assert nginx.poll() is None, \
                        nginx.stderr.read().decode() if nginx.stderr else ""
                    time.sleep(0.1)
    assert answers == {client: {"data": [{"id": "tiny"}]} for client in ("127.0.0.1", "::1")}
    assert Handler.seen.count(("::1", "/v1/models")) == 2


def listen_lines(site: str) -> list[str]:
    return [line.split()[1].rstrip(";") for line in site.splitlines()
            if line.strip().startswith("listen ")]


def test_a_gateway_listens_on_ipv6_only_when_its_own_address_is_ipv6(tmp_path):
    """The gateway's nginx adds `listen [::]:P` (which fails where the kernel has no IPv6)
    only for a gateway addressed by IPv6; the heads' addresses do not matter."""
    mixed = [[doc(0), "198.18.250.2"], ["198.18.250.3", doc(3)]]
    on_ipv4 = render_site(v6_inventory(tmp_path, mixed, gateway="n1")).decode()
    assert listen_lines(on_ipv4) == ["8080"]
    on_ipv6 = render_site(v6_inventory(tmp_path, mixed, gateway="n3")).decode()
    assert listen_lines(on_ipv6) == ["8080", "[::]:8080"]
    nginx_t(tmp_path / "nginx", on_ipv6)


def test_the_prometheus_config_for_ipv6_hosts_passes_promtool(tmp_path):
    inv = v6_inventory(tmp_path, [[doc(0), doc(1)]])
    write_files(tmp_path / "cluster", render_cluster(inv))
    config = tmp_path / "cluster" / "prometheus" / "prometheus.yml"
    result = subprocess.run([tool("promtool"), "check", "config", str(config)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    text = config.read_text()
    assert f'"[{doc(0)}]:8000"' in text
    assert [f'"[{doc(i)}]:9101"' in text for i in range(2)] == [True, True]


def test_prometheus_scrapes_the_rendered_targets_on_ipv6_loopback(tmp_path, v6_server):
    """promtool accepts an unbracketed IPv6 target too; the real Prometheus, scraping,
    does not ("too many colons"): run it on the rendered config, with a control job."""
    exporter = LoopbackV6(("::1", 0), Handler)
    threading.Thread(target=exporter.serve_forever, daemon=True).start()
    exporter_port = exporter.server_address[1]
    try:
        inv = v6_inventory(tmp_path, [["::1"]], serving=f", port: {v6_server}",
                           deploy=f", exporter_port: {exporter_port}")
        out = tmp_path / "prometheus"
        write_files(out.parent, prometheus_files(inv, scrape_interval="1s",
                                                 evaluation_interval="1s"))
        config = out / "prometheus.yml"
        config.write_text(config.read_text() + '  - job_name: "control-unbracketed"\n'
                          f'    static_configs: [{{targets: ["::1:{v6_server}"]}}]\n')
        targets = scrape_results(config, tmp_path / "tsdb", jobs=3)
    finally:
        exporter.shutdown()
        exporter.server_close()
    assert targets["ascendctl-engine"] == (f"http://[::1]:{v6_server}/metrics", "")
    assert targets["ascendctl-npu"] == (f"http://[::1]:{exporter_port}/metrics", "")
    assert "too many colons" in targets["control-unbracketed"][1]


def scrape_results(config: Path, storage: Path, *, jobs: int) -> dict[str, tuple[str, str]]:
    """{job: (scrape URL, last error)} once every job was scraped, from a Prometheus run
    on CONFIG (its web API on a loopback port)."""
    log = config.parent / "prometheus.log"
    with open(log, "wb") as handle:
        server = subprocess.Popen(
            [tool("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={storage}",
             "--web.listen-address=127.0.0.1:0"],
            stdout=handle, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        api = None
        while time.monotonic() < deadline:
            assert server.poll() is None, log.read_text()
            if api is None:
                found = re.search(r'msg="Listening on" address=(127\.0\.0\.1:\d+)',
                                  log.read_text())
                api = found and f"http://{found.group(1)}/api/v1/targets"
            if api:
                try:
                    with urllib.request.urlopen(api, timeout=5) as response:
                        active = json.load(response)["data"]["activeTargets"]
                except urllib.error.HTTPError as err:
                    if err.code != 503:            # 503: listening, not ready yet
                        raise
                    time.sleep(0.25)
                    continue
                scraped = {t["labels"]["job"]: (t["scrapeUrl"], t["lastError"])
                           for t in active if not t["lastScrape"].startswith("0001-")}
                if len(scraped) == jobs:
                    return scraped
            time.sleep(0.25)
        raise AssertionError(f"Prometheus scraped not every job in 60 s:\n{log.read_text()}")
    finally:
        server.terminate()
        server.wait(timeout=30)


# -- ssh and the connect errors ---------------------------------------------------------

def test_ssh_takes_the_bare_ipv6_address_the_weights_relay_passes(tmp_path):
    """`ssh -G` (prints the resolved settings, connects to nothing): the relay's argv
    names the host bare after `--`; `user@[v6]` would make the brackets part of the name."""
    from ascendctl.weights.openssh import known_hosts_entry_name, ssh_destination

    inv = v6_inventory(tmp_path, [[doc(0), doc(1)]])
    host = inv.hosts[0]
    argv = ssh_destination(host)
    assert argv[-2:] == ["--", doc(0)]
    settings = subprocess.run(["ssh", "-G", *argv], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=30).stdout.splitlines()
    assert f"hostname {doc(0)}" in settings and "port 22" in settings
    bracketed = subprocess.run(["ssh", "-G", f"root@[{doc(0)}]"], capture_output=True,
                               text=True, stdin=subprocess.DEVNULL, timeout=30).stdout
    assert f"hostname [{doc(0)}]" in bracketed.splitlines()
    # known_hosts names a non-default port in brackets for every kind of host
    assert known_hosts_entry_name(host) == doc(0)


def test_a_connect_error_names_an_ipv6_address_with_its_port():
    from ascendctl.transport.classify import classify_connect_error

    err = classify_connect_error(TimeoutError(), host="n0", address=doc(0), port=2222,
                                 user="root", timeout=3.0, key=None, known_hosts="/k")
    assert f"no answer from [{doc(0)}]:2222 within 3s" in err.reason
    # a HostName from ~/.ssh/config is not validated: the message is still made
    odd = classify_connect_error(TimeoutError(), host="n0", address="[::1]", port=22,
                                 user="root", timeout=3.0, key=None, known_hosts="/k")
    assert "no answer from [::1]:22" in odd.reason


# -- messages that name an address with a port ------------------------------------------

def test_two_hosts_at_one_ipv6_address_and_port_are_named_in_brackets(tmp_path):
    from ascendctl.errors import InputError

    with pytest.raises(InputError) as raised:
        v6_inventory(tmp_path, [[doc(0), doc(0)]])
    assert raised.value.field == "all.children.nodes.children.g0.hosts.n1.ansible_host"
    assert f"[{doc(0)}]:22 is also host n0" in str(raised.value)


def test_wait_for_reaches_an_ipv6_port_and_names_it_in_brackets(v6_server):
    """The real wait_for script, run by this Python: an open port on [::1], then a closed
    one (its message), then a host the playbook wrote with brackets (named as given)."""
    import sys

    from tests.unit.test_playbook_modules import run_module

    common = {"python": sys.executable, "timeout": 0.5, "sleep": 0.1}
    opened, _ = run_module("wait_for", {"host": "::1", "port": v6_server, **common})
    assert not opened.failed and f"port {v6_server} open" in opened.msg
    closed_port = free_port()
    closed, _ = run_module("wait_for", {"host": "::1", "port": closed_port, **common})
    assert closed.failed and f"waiting for [::1]:{closed_port} to be started" in closed.msg
    odd, _ = run_module("wait_for", {"host": "[::1]", "port": closed_port, **common})
    assert odd.failed and f"waiting for [::1]:{closed_port} to be started" in odd.msg
