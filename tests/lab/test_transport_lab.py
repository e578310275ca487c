"""The SSH transport against the lab's real sshd: one connection per host, one round trip
per script, clear per-host errors (powered off, sshd stopped, wrong key, unknown or
changed host key) within the connect timeout, accept-new, jump hosts."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest
import yaml

from ascendctl.exitcodes import Exit
from ascendctl.load import load_inventory
from ascendctl.transport import ConnectError, ConnectKind, HostStatus, SshPool, put_file

pytestmark = pytest.mark.lab
ENGINE_FREE = True   # starts no vLLM process: runs beside the engine suite (tests/conftest.py)

CONNECT_TIMEOUT = 3.0


@pytest.fixture(scope="module")
def flab(lab_factory):
    """A lab of its own for fault injection (4 small nodes)."""
    return lab_factory(4, npus_per_node=1)


def write_inventory(lab, path: Path, *, ssh: dict | None = None,
                    host_ssh: dict[str, dict] | None = None) -> Path:
    data = yaml.safe_load(Path(lab.inventory_path).read_text())
    variables = data["all"]["vars"]
    variables.setdefault("model", {"path": "/srv/models/tiny"})
    variables["ssh"] = {**variables["ssh"], "connect_timeout": CONNECT_TIMEOUT,
                        "connect_retries": 0, **(ssh or {})}
    hosts = data["all"]["children"]["nodes"]["hosts"]
    for name, extra in (host_ssh or {}).items():
        hosts[name]["ssh"] = extra
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def play(inventory: Path, tmp_path: Path, *args: str) -> tuple[int, dict, float]:
    book = tmp_path / "probe.yaml"
    book.write_text(textwrap.dedent("""
        - hosts: all
          tasks:
            - name: who
              command: [hostname]
              changed_when: false
            - name: uptime
              command: [cat, /proc/uptime]
              changed_when: false
        """))
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "ascendctl", "play", str(book), "-i",
                           str(inventory), "--json", *args], capture_output=True, text=True,
                          timeout=120)
    elapsed = time.monotonic() - started
    return proc.returncode, json.loads(proc.stdout), elapsed


def node_key_line(lab, node: str) -> str:
    for line in Path(lab.known_hosts).read_text().splitlines():
        if line.split()[0] == lab.node(node).mgmt_ip:
            return line
    raise AssertionError(f"no known_hosts line for {node}")


def test_key_problems_give_clear_per_host_errors(flab, tmp_path):
    wrong_key = tmp_path / "wrong_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong_key)],
                   check=True)
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    changed = tmp_path / "changed_known_hosts"
    # node3's address, but node0's key: what a reinstalled (or spoofed) node looks like
    node0_key = node_key_line(flab, "node0").split(None, 1)[1]
    changed.write_text(f"{flab.node('node3').mgmt_ip} {node0_key}\n")
    inventory = write_inventory(flab, tmp_path / "inv.yaml", host_ssh={
        "node1": {"private_key": str(wrong_key)},
        "node2": {"known_hosts": str(empty)},
        "node3": {"known_hosts": str(changed)},
    })
    code, report, elapsed = play(inventory, tmp_path)
    assert code == Exit.UNREACHABLE
    who = report["plays"][0]["tasks"][0]["hosts"]
    assert who["node0"]["status"] == "ok"
    assert report["plays"][0]["tasks"][1]["hosts"]["node0"]["status"] == "ok"
    assert who["node1"]["status"] == "unreachable"
    assert who["node1"]["error_kind"] == ConnectKind.AUTH
    assert f"authentication failed for root@{flab.node('node1').mgmt_ip}:22" in \
        who["node1"]["msg"] and str(wrong_key) in who["node1"]["msg"]
    assert who["node2"]["error_kind"] == ConnectKind.UNKNOWN_HOST_KEY
    assert "unknown host key" in who["node2"]["msg"] and "SHA256:" in who["node2"]["msg"]
    assert who["node3"]["error_kind"] == ConnectKind.HOST_KEY_CHANGED
    assert "host key CHANGED" in who["node3"]["msg"]
    for node in ("node1", "node2", "node3"):
        assert who[node]["duration_s"] < CONNECT_TIMEOUT
        assert node not in report["plays"][0]["tasks"][1]["hosts"]   # left the run
    assert report["recap"]["node0"]["ok"] == 2
    assert elapsed < 15
    # nothing was recorded in the files under strict checking
    assert empty.read_text() == ""


def test_power_off_and_sshd_down_fail_within_the_connect_timeout(flab, tmp_path):
    inventory = write_inventory(flab, tmp_path / "inv.yaml")
    flab.fault("node1", "power-off")
    flab.fault("node2", "sshd-down")
    try:
        code, report, elapsed = play(inventory, tmp_path)
    finally:
        flab.heal()
    assert code == Exit.UNREACHABLE
    who = report["plays"][0]["tasks"][0]["hosts"]
    assert who["node0"]["status"] == "ok" and who["node3"]["status"] == "ok"
    assert who["node1"]["status"] == "unreachable"
    assert who["node1"]["error_kind"] in (ConnectKind.NO_ROUTE, ConnectKind.TIMEOUT)
    assert who["node2"]["status"] == "unreachable"
    assert who["node2"]["error_kind"] == ConnectKind.REFUSED
    assert "connection refused" in who["node2"]["msg"]
    assert who["node1"]["duration_s"] <= CONNECT_TIMEOUT + 1.0
    assert who["node2"]["duration_s"] < 1.0
    assert report["recap"]["node3"]["ok"] == 2
    assert elapsed < CONNECT_TIMEOUT + 10


def test_one_connection_and_one_execution_per_script(lab, tmp_path):
    inv = load_inventory(write_inventory(lab, tmp_path / "inv.yaml"))
    script = "\n".join(f'echo "line {i} $1 $2"' for i in range(40)) + "\ncat; exit 7\n"
    path = f"/tmp/transport-{uuid.uuid4().hex[:8]}/x y$(touch /tmp/nope)"
    with SshPool(inv.hosts) as pool:
        results = pool.map(lambda c: c.run_script(script, ["a b", "$(c)"]))
        for node in lab.nodes:
            res = results[node.name].value
            assert res.exit_status == 7
            lines = res.stdout.splitlines()
            assert len(lines) == 40 and lines[39] == "line 39 a b $(c)"
        assert pool.exec_counts() == {n.name: 1 for n in lab.nodes}
        pool.map(lambda c: c.run(["mkdir", "-p", path.rsplit("/", 1)[0]]))
        changes = pool.map(lambda c: put_file(c, path, b"\x00binary\xff", mode="0600"))
        assert all(r.value.changed for r in changes.values())
        again = pool.map(lambda c: put_file(c, path, b"\x00binary\xff", mode="0600"))
        assert not any(r.value.changed for r in again.values())
        assert pool.exec_counts() == {n.name: 4 for n in lab.nodes}
        for name in pool.host_names:
            assert pool.conn(name).stats.connects == 1       # one connection, reused
        timed = pool.conn("node0").run(["sleep", "5"], timeout=1)
        assert timed.timed_out and timed.exit_status is None and timed.duration < 2
        assert pool.conn("node0").run(["true"]).ok            # the connection survived
    for node in lab.nodes:
        assert lab.exec(node.name, ["od", "-An", "-c", path]).stdout.split() == \
            ["\\0", "b", "i", "n", "a", "r", "y", "377"]
        assert lab.exec(node.name, ["stat", "-c", "%a", path]).stdout.strip() == "600"
        lab.exec(node.name, ["rm", "-rf", path.split("/x y")[0]])
        assert lab.exec(node.name, ["test", "-e", "/tmp/nope"], check=False).returncode == 1


def test_accept_new_records_unknown_keys_and_still_refuses_changed_ones(lab, tmp_path):
    fresh = tmp_path / "known_hosts"
    inventory = write_inventory(lab, tmp_path / "inv.yaml",
                                ssh={"known_hosts": str(fresh),
                                     "host_key_checking": "accept-new"})
    inv = load_inventory(inventory)
    with SshPool(inv.hosts) as pool:
        assert all(r.ok for r in pool.run(["true"]).values())
        recorded = {n: pool.conn(n).recorded_host_keys for n in pool.host_names}
    assert all(len(keys) == 1 for keys in recorded.values())
    lines = fresh.read_text().splitlines()
    assert sorted(line.split()[0] for line in lines) == sorted(n.mgmt_ip for n in lab.nodes)
    # the recorded keys are the nodes' real keys: strict checking now passes
    strict = load_inventory(write_inventory(lab, tmp_path / "strict.yaml",
                                            ssh={"known_hosts": str(fresh)}))
    with SshPool(strict.hosts) as pool:
        assert all(r.ok for r in pool.run(["true"]).values())
    # swap the two keys: accept-new must refuse both as CHANGED
    (a_host, a_rest), (b_host, b_rest) = [line.split(None, 1) for line in lines[:2]]
    fresh.write_text(f"{a_host} {b_rest}\n{b_host} {a_rest}\n")
    with SshPool(inv.hosts) as pool:
        results = pool.run(["true"])
    assert {r.error_kind for r in results.values()} == {ConnectKind.HOST_KEY_CHANGED}


def test_jump_host_from_inventory_and_from_ssh_config(lab, tmp_path):
    head, follower = lab.nodes[0], lab.nodes[1]
    inventory = write_inventory(lab, tmp_path / "inv.yaml",
                                host_ssh={follower.name: {"jump_host":
                                                          f"root@{head.mgmt_ip}"}})
    inv = load_inventory(inventory)
    with SshPool([inv.host(follower.name)]) as pool:
        res = pool.run(["sh", "-c", "echo $SSH_CONNECTION"])[follower.name]
    assert res.ok, res.error
    # the follower sees the connection coming from the head node, not from us
    assert res.value.stdout.split()[0] == head.mgmt_ip
    config = tmp_path / "ssh_config"
    config.write_text(f"Host {follower.mgmt_ip}\n    ProxyJump root@{head.mgmt_ip}\n")
    plain = load_inventory(write_inventory(lab, tmp_path / "plain.yaml"))
    with SshPool([plain.host(follower.name)], ssh_config_path=str(config)) as pool:
        res = pool.run(["sh", "-c", "echo $SSH_CONNECTION"])[follower.name]
    assert res.ok and res.value.stdout.split()[0] == head.mgmt_ip
    # User and Port come from ~/.ssh/config when the inventory does not give them
    data = yaml.safe_load((tmp_path / "plain.yaml").read_text())
    data["all"]["vars"]["ssh"].pop("user")
    data["all"]["vars"]["ssh"].pop("port")
    (tmp_path / "nouser.yaml").write_text(yaml.safe_dump(data))
    config.write_text(f"Host {follower.mgmt_ip}\n    User nobody\n    Port 22\n")
    nouser = load_inventory(tmp_path / "nouser.yaml")
    with SshPool([nouser.host(follower.name)], ssh_config_path=str(config)) as pool:
        res = pool.run(["true"])[follower.name]
    assert res.error_kind == ConnectKind.AUTH and "nobody@" in res.error
    # a jump host with an unknown key is refused like any other host
    empty = tmp_path / "empty"
    empty.write_text("")
    bad = load_inventory(write_inventory(
        lab, tmp_path / "bad.yaml", host_ssh={follower.name: {
            "jump_host": f"root@{head.mgmt_ip}", "known_hosts": str(empty)}}))
    with SshPool([bad.host(follower.name)]) as pool:
        res = pool.run(["true"])[follower.name]
    assert res.status is HostStatus.UNREACHABLE
    assert res.error_kind == ConnectKind.UNKNOWN_HOST_KEY and "jump host" in res.error


def test_ctrl_c_during_a_long_command_stops_promptly(lab, tmp_path):
    inv = load_inventory(write_inventory(lab, tmp_path / "inv.yaml"))
    pool = SshPool(inv.hosts)
    assert all(r.ok for r in pool.run(["true"]).values())
    main = threading.get_ident()
    timer = threading.Timer(0.5, lambda: signal.pthread_kill(main, signal.SIGINT))
    started = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        pool.run(["sleep", "30"])
    assert time.monotonic() - started < 5
    assert not any(pool.conn(n).is_open for n in pool.host_names)
    with pytest.raises(ConnectError):
        pool.conn("node0").run(["true"])
    pool.close()
