"""A PD unit as deploy runs it: one gang (both sides, the router last) kept by one
supervisor on the first prefill node, vllm-router's unit there (systemd-analyze verify),
the gateway checking the client's key at a prefill engine (nginx -t, and the real nginx
answering 401), status naming roles and counting KV, and the loader's rank-0 rule."""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from ascendctl.errors import InputError
from ascendctl.inventory.pd import entry_port, gang_view
from ascendctl.load import load_inventory
from ascendctl.render import render_release, write_files
from ascendctl.render.proxy import render_site
from ascendctl.status import kv_transfer
from ascendctl.status.model import NodeStatus
from ascendctl_lab import inventory
from tests.unit.nginx_run import nginx_conf
from tests.unit.test_lab_pd import build
from tests.unit.test_render_validators import tool, verify_units


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def lab_pd(tmp_path: Path, count: int = 2, edit=None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    data = build(tmp_path, count, pd=True)
    if edit is not None:
        edit(data)
    path = tmp_path / "pd.yaml"
    inventory.write(path, data)
    return load_inventory(path)


def config(files, name: str) -> dict:
    return json.loads(next(f for f in files if f.path == name).content)


def test_the_unit_is_one_gang_kept_from_its_prefill_head_with_the_router_last(tmp_path):
    inv = lab_pd(tmp_path, 4)
    nodes = render_release(inv, release_id="r-pd", secrets={"api_key": "sk-lab"})
    supervisor = config(nodes["node0"], "supervisor.json")
    assert [(r["node"], r["rank"]) for r in supervisor["ranks"]] == [("node0", 0), ("node1", 1)]
    assert supervisor["steps"] == [["node0", "ascendctl-engine.service"],
                                   ["node1", "ascendctl-engine.service"],
                                   ["node0", "ascendctl-pd-router.service"]]
    assert supervisor["probe_port"] == entry_port(inv) == 8100
    assert "supervisor.json" not in {f.path for f in nodes["node1"]}      # decode: agent only
    decode_agent = config(nodes["node1"], "agent.json")
    assert decode_agent["plan_url"].startswith("http://198.18.1.11:")    # its unit's head
    assert decode_agent["units"] == ["ascendctl-engine.service"]
    # the second unit has its own gang and router (node2 prefill, node3 decode)
    assert config(nodes["node2"], "supervisor.json")["ranks"][1]["node"] == "node3"
    assert gang_view(inv, "unit1").head.name == "node2"


def test_the_router_unit_passes_systemd_analyze_and_holds_the_key_only_in_its_0600_file(
        tmp_path):
    inv = lab_pd(tmp_path)
    nodes = render_release(inv, release_id="r-pd", secrets={"api_key": "sk-lab-secret"})
    unit = next(f for f in nodes["node0"] if f.path.endswith("ascendctl-pd-router.service"))
    text = unit.content.decode()
    argv = shlex.split(next(line for line in text.splitlines()
                            if line.startswith("ExecStart="))[len("ExecStart="):])
    assert argv[:2] == ["/usr/local/bin/vllm-router", "--vllm-pd-disaggregation"]
    assert argv[argv.index("--prefill") + 1] == "http://198.18.1.11:8000"
    assert argv[argv.index("--decode") + 1] == "http://198.18.1.12:8000"
    assert "sk-lab-secret" not in text
    secrets = next(f for f in nodes["node0"] if f.path == "secrets.env")
    assert secrets.mode == 0o600 and b'OPENAI_API_KEY="sk-lab-secret"' in secrets.content
    assert b"OPENAI_API_KEY" not in next(f for f in nodes["node1"]
                                         if f.path == "secrets.env").content
    # verify wants the program to exist here: the same unit with one that does
    def here(data):
        data["all"]["vars"]["pd"]["router"]["executable"] = tool("true")
    nodes = render_release(lab_pd(tmp_path / "here", edit=here), release_id="r-pd",
                           secrets={"api_key": "sk-lab-secret"})
    release = tmp_path / "release"
    write_files(release, nodes["node0"])
    (release / "runtime" / "ascendctl_runtime").mkdir(parents=True, exist_ok=True)
    verify_units(release / "units")


def test_a_layerwise_unit_is_refused_naming_the_decode_first_flow(tmp_path):
    def layerwise(data):
        data["all"]["vars"]["pd"].update(connector="MooncakeLayerwiseConnector")
        del data["all"]["vars"]["pd"]["shared_storage_path"]
    inv = lab_pd(tmp_path, edit=layerwise)
    with pytest.raises(InputError) as caught:
        render_release(inv, release_id="r-pd")
    assert caught.value.field == "pd.connector" and "decode-first" in caught.value.reason


def test_rank_0_of_a_unit_must_prefill(tmp_path):
    def swapped(data):
        hosts = data["all"]["children"]["nodes"]["children"]["unit0"]["hosts"]
        hosts["node0"]["rank"], hosts["node1"]["rank"] = 1, 0
        data["all"]["children"]["nodes"]["children"]["unit0"]["hosts"] = {
            "node1": hosts["node1"], "node0": hosts["node0"]}
    with pytest.raises(InputError) as caught:
        lab_pd(tmp_path, edit=swapped)
    assert "rank 0 of serving group unit0 is node1, a decode host" in caught.value.reason


def test_the_gateway_checks_the_clients_key_at_a_prefill_engine(tmp_path):
    inv = lab_pd(tmp_path, 4)
    site = render_site(inv).decode()
    assert "auth_request /_ascendctl_key;" in site
    assert "server 127.0.0.1:8000" in site and "server 198.18.1.13:8000" in site  # P heads
    assert "server 127.0.0.1:8100" in site and "server 198.18.1.13:8100" in site  # routers
    conf = nginx_conf(tmp_path / "nginx", site)
    result = subprocess.run([tool("nginx"), "-t", "-c", str(conf), "-p", str(tmp_path / "nginx")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr

    def no_key(data):
        del data["all"]["vars"]["serving"]["api_key"]
    assert "auth_request" not in render_site(lab_pd(tmp_path / "open", edit=no_key)).decode()


def test_the_real_nginx_refuses_a_wrong_key_before_the_router(tmp_path):
    # the prefill engine's key check is an HTTP server answering 401 unless the key is
    # right; the router, a server that would answer anything
    from tests.unit.nginx_run import running_nginx
    import http.server
    import threading

    class Engine(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            ok = self.headers.get("Authorization") == "Bearer sk-right"
            self.send_response(200 if ok else 401)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_POST = do_GET

    class Router(Engine):
        def do_POST(self):
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), cls) for cls in (Engine, Router)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    engine_port, router_port = (s.server_address[1] for s in servers)
    taken = {engine_port, router_port, router_port + 1, engine_port + 7}
    proxy_port = next(port for port in iter(free_port, None) if port not in taken)

    def ports(data):
        vars_ = data["all"]["vars"]
        vars_["serving"]["port"] = engine_port
        vars_["serving"]["proxy"]["port"] = proxy_port
        vars_["pd"]["router"]["port"] = router_port
        vars_["pd"]["decode"]["port"] = engine_port + 7
    try:
        site = render_site(lab_pd(tmp_path, edit=ports)).decode()
        with running_nginx(tmp_path / "nginx", site):
            def post(key):
                request = urllib.request.Request(
                    f"http://127.0.0.1:{proxy_port}/v1/completions", data=b"{}",
                    headers={"Authorization": f"Bearer {key}"} if key else {})
                try:
                    with urllib.request.urlopen(request, timeout=10) as answer:
                        return answer.status
                except urllib.error.HTTPError as err:
                    return err.code
            for _ in range(50):
                try:
                    statuses = (post("sk-right"), post("sk-wrong"), post(None))
                    break
                except urllib.error.URLError:
                    import time
                    time.sleep(0.1)
            assert statuses == (200, 401, 401)
    finally:
        for server in servers:
            server.shutdown()


def test_status_counts_the_routers_requests_and_the_decodes_external_kv():
    prefill = NodeStatus(name="node0", rank=0, reachable=True, role="prefill",
                         metrics={"vllm:external_prefix_cache_hits_total": 999.0},
                         router_metrics={"vllm_router_pd_requests_total": 18.0,
                                         "vllm_router_pd_decode_requests_total": 18.0})
    decode = NodeStatus(name="node1", rank=0, reachable=True, role="decode",
                        metrics={"vllm:external_prefix_cache_hits_total": 576.0,
                                 "vllm:external_prefix_cache_queries_total": 900.0})
    counted = kv_transfer([prefill, decode])
    assert counted["requests"] == 18.0 and counted["decode_requests"] == 18.0
    assert counted["decode_external_hit_tokens"] == 576.0       # decode only, not prefill
    assert counted["decode_external_query_tokens"] == 900.0
    assert decode.where == "decode rank 0 (node1)"
    assert kv_transfer([prefill])["decode_external_hit_tokens"] is None


def test_the_lab_inventory_moves_kv_in_32_token_blocks(tmp_path):
    data = yaml.safe_load(yaml.safe_dump(build(tmp_path, 2, pd=True)))
    assert data["all"]["vars"]["serving"]["extra_args"] == ["--block-size", "32"]


def test_a_rolling_deploy_switches_one_unit_at_a_time_with_the_other_in_the_balancer(tmp_path):
    # the deploy's rolling block over two PD units: each batch acts on one unit's prefill
    # and decode nodes, heads-only plays reach the unit's router node, and the site the
    # balancer renders for the first batch takes only that unit's router out
    from tests.unit.test_playbook_rolling import ROLLOUT, run

    inv = lab_pd(tmp_path, 4)
    book = ROLLOUT.replace("MAX", "1").replace("'g1' in rolling.groups", "false")
    report, rec, _ = run(tmp_path, book, inventory=inv)
    hosts = dict(rec.plays)
    assert [name for name, _ in rec.plays if "[" in name] == [
        "switch [unit0]", "heads only [unit0]", "cleanup [unit0]",
        "switch [unit1]", "heads only [unit1]", "cleanup [unit1]"]
    assert hosts["switch [unit0]"] == ["node0", "node1"]
    assert hosts["switch [unit1]"] == ["node2", "node3"]
    assert hosts["heads only [unit0]"] == ["node0"] and hosts["heads only [unit1]"] == ["node2"]
    assert int(report.exit_code()) == 0
    site = render_site(inv, drained={"unit0"}).decode()
    # the only unit left in the balancer is never taken out by a failed request
    assert "server 127.0.0.1:8100 max_fails=0 fail_timeout=10s down;" in site
    assert "server 198.18.1.13:8100 max_fails=0 fail_timeout=10s;" in site
