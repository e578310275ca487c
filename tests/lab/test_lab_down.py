"""`lab up` with a cached image is fast; `lab down` leaves nothing behind."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from ascendctl_lab import Lab, registry
from tests.conftest import require_lab, unique_lab_name

pytestmark = pytest.mark.lab
ENGINE_FREE = True   # starts no vLLM process: runs beside the engine suite (tests/conftest.py)


def host_links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return {line.split(": ")[1].split("@")[0] for line in out.splitlines()}


def test_up_is_fast_and_down_removes_everything():
    require_lab()
    from ascendctl_lab.image import ensure_image

    ensure_image()                       # the image is cached before timing `up`
    lab = Lab(unique_lab_name("d"))
    links_before = host_links()
    started = time.monotonic()
    lab.up(nodes=2)
    elapsed = time.monotonic() - started
    print(f"lab up --nodes 2 (cached image): {elapsed:.1f}s")
    assert elapsed < 120
    nodes = lab.nodes
    lab_net = lab.net
    created_links = {lab_net.mgmt_bridge, lab_net.roce_bridge}
    for node in nodes:
        created_links.add(lab_net.host_mgmt_veth(node.rank))
        created_links |= {lab_net.host_roce_veth(node.rank, p) for p in range(lab.npus_per_node)}
    assert created_links <= host_links() and not created_links & links_before
    pids = [n.nspawn_pid for n in nodes] + [n.leader_pid for n in nodes]
    netns = [n.netns for n in nodes]
    state_dir = lab.state_dir
    started = time.monotonic()
    lab.down()
    print(f"lab down (2 nodes): {time.monotonic() - started:.1f}s")
    assert not host_links() & created_links
    mounts = Path("/proc/mounts").read_text()
    assert str(state_dir) not in mounts and lab.name not in mounts
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(ns in listed for ns in netns)
    for hierarchy in ("/sys/fs/cgroup/systemd", "/sys/fs/cgroup/unified"):
        for node in nodes:
            assert not Path(hierarchy, node.machine).exists()
    assert not state_dir.exists()
    for node in nodes:
        assert not Path("/run/systemd/nspawn/propagate", node.machine).exists()
    assert registry.lookup(lab.name) is None
    lab.down()                           # idempotent
