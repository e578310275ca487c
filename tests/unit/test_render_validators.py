"""Rendered files pass the real validators: systemd-analyze verify, nginx -t, promtool.

A missing validator is a failure naming the Debian package (scripts/bootstrap installs it)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ascendctl.render import release_dir, render_cluster, render_release, write_files
from tests.unit.test_plan_inventories import make_inventory, serving, set_nodes

VALIDATORS = {"systemd-analyze": "systemd", "nginx": "nginx (or nginx-light)",
              "promtool": "prometheus"}


def tool(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")
    if path is None:
        pytest.fail(f"{name} is not installed: apt-get install -y {VALIDATORS[name]} "
                    "(scripts/bootstrap does)", pytrace=False)
    return path


def deployed_release(tmp_path: Path, edit=None) -> tuple[object, dict[str, Path]]:
    """Render into a temporary deploy root (with a space, to exercise quoting) and lay the
    files out the way deploy does, so every path the units name exists."""
    root = tmp_path / "deploy root"

    def change(data):
        data["all"]["vars"]["deploy"]["root"] = str(root)
        if edit is not None:
            edit(data)

    inv = make_inventory(tmp_path, change)
    nodes = render_release(inv, release_id="r-verify", secrets={"api_key": "k"})
    dirs = {}
    for node, files in nodes.items():
        release = Path(release_dir(inv.deploy.root, "r-verify")) / node
        write_files(release, files)
        (release / "runtime" / "ascendctl_runtime").mkdir(parents=True, exist_ok=True)
        dirs[node] = release
    return inv, dirs


def verify_units(unit_dir: Path) -> None:
    units = sorted(unit_dir.glob("*.service"))
    assert units, f"no units in {unit_dir}"
    result = subprocess.run([tool("systemd-analyze"), "verify", *map(str, units)],
                            capture_output=True, text=True, cwd=unit_dir)
    ours = [line for line in (result.stdout + result.stderr).splitlines()
            if "ascendctl-" in line or str(unit_dir) in line]
    assert result.returncode == 0 and not ours, result.stdout + result.stderr


@pytest.mark.parametrize("mode", ["dp", "mp", "ray"])
def test_units_pass_systemd_analyze_verify(tmp_path, mode):
    def layout(data):
        s = serving(data)
        if mode != "dp":
            s.update(mode=mode, data_parallel_size=1, data_parallel_size_local=None,
                     api_server_count=None, tensor_parallel_size=8,
                     pipeline_parallel_size=2)
    _, dirs = deployed_release(tmp_path, layout)
    for release in dirs.values():
        verify_units(release / "units")
    names = {p.name for p in (dirs["node1"] / "units").iterdir()}
    if mode == "ray":
        assert "ascendctl-ray.service" in names and "ascendctl-engine.service" not in names
    else:
        assert "ascendctl-engine.service" in names


def test_verify_catches_a_broken_unit(tmp_path):
    # the check above is only worth something if verify rejects bad units here
    _, dirs = deployed_release(tmp_path)
    unit = dirs["node0"] / "units" / "ascendctl-engine.service"
    unit.write_text(unit.read_text().replace("Restart=no", "Restart=sometimes"))
    with pytest.raises(AssertionError):
        verify_units(unit.parent)


def test_nginx_site_passes_nginx_t(tmp_path):
    inv = make_inventory(tmp_path)
    cluster = tmp_path / "cluster"
    write_files(cluster, render_cluster(inv))
    site = cluster / "nginx" / "ascendctl.conf"
    prefix = tmp_path / "nginx"
    (prefix / "logs").mkdir(parents=True)
    conf = prefix / "nginx.conf"
    conf.write_text(f"pid {prefix}/nginx.pid;\nerror_log {prefix}/logs/error.log;\n"
                    f"events {{}}\nhttp {{\n  access_log off;\n  include {site};\n}}\n")
    result = subprocess.run([tool("nginx"), "-t", "-c", str(conf), "-p", str(prefix)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "test is successful" in result.stderr
    text = site.read_text()
    assert f"listen {inv.serving.proxy.port};" in text
    for directive in ("proxy_buffering off;", "proxy_cache off;",
                      "chunked_transfer_encoding on;", "proxy_read_timeout 3600s;"):
        assert directive in text


def test_alert_rules_and_scrape_config_pass_promtool(tmp_path):
    inv = make_inventory(tmp_path)
    cluster = tmp_path / "cluster"
    write_files(cluster, render_cluster(inv))
    rules = cluster / "prometheus" / "ascendctl-rules.yml"
    result = subprocess.run([tool("promtool"), "check", "rules", str(rules)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 16 rules found" in result.stdout
    result = subprocess.run([tool("promtool"), "check", "config",
                             str(cluster / "prometheus" / "prometheus.yml")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    text = rules.read_text()
    for needle in ("ascendctl_serving_up", "ascendctl_node_problems",
                   "ascendctl_engine_start_time_seconds", "ascendctl_group_gave_up",
                   "ascendctl_npu_foreign_processes",
                   "npu_chip_info_health_status", "npu_chip_info_hbm_used_memory",
                   "npu_chip_info_link_status", "vllm:kv_cache_usage_perc",
                   "vllm:num_requests_waiting", "vllm:time_to_first_token_seconds_bucket",
                   "> 0.8"):   # slo.max_p99_ttft_ms 800 -> 0.8 s
        assert needle in text


def test_promtool_rejects_a_broken_rule(tmp_path):
    inv = make_inventory(tmp_path)
    write_files(tmp_path, render_cluster(inv))
    rules = tmp_path / "prometheus" / "ascendctl-rules.yml"
    rules.write_text(rules.read_text().replace("histogram_quantile(0.99,",
                                               "histogram_quantile(0.99"))
    result = subprocess.run([tool("promtool"), "check", "rules", str(rules)],
                            capture_output=True, text=True)
    assert result.returncode != 0


def test_ttft_rule_is_left_out_without_an_slo(tmp_path):
    inv = make_inventory(tmp_path, lambda d: d["all"]["vars"]["slo"].pop("max_p99_ttft_ms"))
    rules = next(f for f in render_cluster(inv) if f.path.endswith("rules.yml"))
    assert b"TtftP99" not in rules.content


def test_four_node_exporter_targets(tmp_path):
    def four(data):
        set_nodes(data, 4)
        serving(data)["data_parallel_size"] = 4
    inv = make_inventory(tmp_path, four)
    scrape = next(f for f in render_cluster(inv) if f.path.endswith("prometheus.yml"))
    for rank in range(4):
        assert f'"198.18.100.{10 + rank}:9101"'.encode() in scrape.content
