"""The playbook engine on the simulated cluster (real sshd, real systemd in every node).

Acceptance: templates, systemd units and commands on 2 nodes; the second run reports 0
changed; --check reports the changes and changes nothing (the nodes' files and unit
states are hashed before and after through `lab exec`, independent of our transport);
hostile inventory values are never executed (a canary proves it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

from ascendctl.errors import InputError
from ascendctl.load import load_inventory

pytestmark = pytest.mark.lab
ENGINE_FREE = True   # starts no vLLM process: runs beside the engine suite (tests/conftest.py)

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "playbooks" / "examples" / "demo.yaml"


def write_inventory(lab, path: Path, **all_vars) -> Path:
    """The lab's own inventory with extra sections (deploy root, custom values, ...)."""
    data = yaml.safe_load(Path(lab.inventory_path).read_text())
    variables = data["all"]["vars"]
    variables.setdefault("model", {"path": "/srv/models/tiny"})
    for key, value in all_vars.items():
        if isinstance(value, dict) and isinstance(variables.get(key), dict):
            variables[key] = {**variables[key], **value}
        else:
            variables[key] = value
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def play(playbook: Path, inventory: Path, *args: str) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, "-m", "ascendctl", "play", str(playbook), "-i",
                           str(inventory), "--json", *args], capture_output=True, text=True,
                          timeout=300)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"no JSON report (exit {proc.returncode}): {proc.stderr}") \
            from None
    return proc.returncode, report


def changed(report: dict) -> dict[str, int]:
    return {host: counts["changed"] for host, counts in report["recap"].items()}


def task_results(report: dict, name: str) -> dict[str, dict]:
    for play_report in report["plays"]:
        for task in play_report["tasks"]:
            if task["name"] == name:
                return task["hosts"]
    raise AssertionError(f"no task {name!r} in the report")


SNAPSHOT = r"""
root=$1 unit=$2
if [ -d "$root" ]; then
  find "$root" -printf '%p %y %m %U:%G %l\n' | LC_ALL=C sort
  find "$root" -type f -exec sha256sum {} + | LC_ALL=C sort
else
  echo "no $root"
fi
f=/etc/systemd/system/$unit
if [ -e "$f" ]; then sha256sum "$f"; stat -c '%a %U' "$f"; else echo "no $f"; fi
systemctl show -p LoadState -p ActiveState -p SubState -p UnitFileState -p MainPID \
  -p NeedDaemonReload -- "$unit"
"""


def snapshot(lab, root: str, unit: str) -> dict[str, str]:
    """Files (names, types, modes, owners, hashes) and unit state on every node."""
    return {n.name: lab.exec(n.name, ["sh", "-c", SNAPSHOT, "snap", root, unit]).stdout
            for n in lab.nodes}


def remote_tasks(report: dict, host: str) -> int:
    """Task results that needed the host (not skipped, not controller-only)."""
    controller = {"assert", "debug", "fail", "set_fact"}
    return sum(1 for p in report["plays"] for t in p["tasks"]
               if t["module"] not in controller and host in t["hosts"]
               and t["hosts"][host]["status"] != "skipped")


def test_demo_converges_check_changes_nothing_and_a_second_run_changes_nothing(lab, tmp_path):
    uid = uuid.uuid4().hex[:8]
    root = f"/var/lib/ascendctl-pbtest-{uid}"
    name, port = f"pbtest-{uid}", 18100 + int(uid[:3], 16) % 800
    unit = f"{name}.service"
    inventory = write_inventory(lab, tmp_path / "inv.yaml", deploy={"root": root})
    extra = ["-e", f"demo_name={name}", "-e", f"demo_port={port}"]
    demo_root = f"{root}/{name}"
    try:
        untouched = snapshot(lab, demo_root, unit)

        code, report = play(DEMO, inventory, "--check", *extra)
        assert code == 0, report
        assert report["check"] is True
        assert all(count >= 5 for count in changed(report).values()), report["recap"]
        page = task_results(report, "page served by the demo service")
        diff = page["node1"]["diff"][0]["diff"]
        assert "+<p>node node1, rank 1 of 2" in diff
        assert snapshot(lab, demo_root, unit) == untouched      # --check changed nothing

        code, report = play(DEMO, inventory, *extra)
        assert code == 0, report
        assert all(count >= 5 for count in changed(report).values()), report["recap"]
        for node in lab.nodes:
            # one remote execution per task on each host: no per-task reconnects or
            # separate stat/copy/chmod round trips
            assert report["remote_executions"][node.name] == remote_tasks(report, node.name)
            assert lab.exec(node.name, ["systemctl", "is-active", unit]).stdout.strip() == \
                "active"
            url = f"http://{node.mgmt_ip}:{port}/index.html"
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            with opener.open(url, timeout=10) as response:
                assert f"node {node.name}, rank {node.rank} of 2" in response.read().decode()
        converged = snapshot(lab, demo_root, unit)

        code, report = play(DEMO, inventory, *extra)
        assert code == 0, report
        assert changed(report) == {"node0": 0, "node1": 0}
        assert snapshot(lab, demo_root, unit) == converged      # not even a restart (MainPID)

        code, report = play(DEMO, inventory, "--check", "-e", "demo_greeting=changed greeting",
                            *extra)
        assert code == 0
        page = task_results(report, "page served by the demo service")
        assert page["node0"]["status"] == "changed"
        diff = page["node0"]["diff"][0]["diff"]
        assert "-<p>hello from ascendctl</p>" in diff and "+<p>changed greeting</p>" in diff
        assert task_results(report, "systemd unit")["node0"]["status"] == "ok"
        assert snapshot(lab, demo_root, unit) == converged

        code, report = play(DEMO, inventory, "-e", "demo_greeting=changed greeting", *extra)
        assert code == 0
        assert task_results(report, "page served by the demo service")["node0"]["status"] == \
            "changed"
        assert task_results(report, "current -> this release (atomic switch)")["node0"][
            "status"] == "ok"
        # the page changed but nothing notified the handler: no restart
        assert all(not t["handler"] for p in report["plays"] for t in p["tasks"])
    finally:
        code, report = play(DEMO, inventory, "-e", "demo_state=absent", *extra)
        assert code == 0, report
        gone = snapshot(lab, demo_root, unit)
        for node in lab.nodes:
            assert f"no {demo_root}" in gone[node.name]
            assert f"no /etc/systemd/system/{unit}" in gone[node.name]
            lab.exec(node.name, ["rm", "-rf", root])


HOSTILE_PLAYBOOK = """
- name: hostile values stay data
  hosts: all
  vars:
    d: "{{ deploy.root }}/d"
    unit: "pbhostile-{{ uid }}.service"
  tasks:
    - directory: {path: "{{ d }}"}
    - template: {src: hostile.conf.j2, dest: "{{ d }}/t.conf", mode: "0600"}
    - copy: {content: "{{ custom.label }}", dest: "{{ d }}/c.txt"}
    - symlink: {path: "{{ d }}/link", src: "{{ d }}/t.conf"}
    - file: {path: "{{ d }}/f-{{ custom.label | regex_replace('/', '_') }}", state: touch}
    - command: [touch, "{{ d }}/cmd-{{ custom.label | regex_replace('/', '_') }}"]
    - name: command string, split before rendering
      command: "printf %s {{ custom.label }}"
      register: printed
    - name: shell with positional args
      shell:
        cmd: 'printf %s "$1" > "$2"'
        args: ["{{ custom.label }}", "{{ d }}/sh.txt"]
    - name: shell with quote filter
      shell: "printf %s {{ custom.label | quote }}"
      register: quoted
    - name: unit whose command line carries the hostile path
      template: {src: hostile.service.j2, dest: "/etc/systemd/system/{{ unit }}"}
    - systemd: {name: "{{ unit }}", daemon_reload: true, state: started}
    - assert:
        that:
          - printed.stdout == custom.label
          - quoted.stdout == custom.label
"""

HOSTILE_TEMPLATE = "label={{ custom.label }}\nroot={{ deploy.root }}\n"
HOSTILE_UNIT = """[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart={{ '/bin/sh' | systemd_quote }} -c {{ 'printf %s "$1" > "$2"' | systemd_quote }} sh {{ custom.label | systemd_quote }} {{ (d ~ '/unit-ran') | systemd_quote }}
"""


def test_hostile_inventory_values_are_never_executed(lab, tmp_path):
    uid = uuid.uuid4().hex[:8]
    canary = f"/tmp/CANARY-{uid}"
    root = (f"/tmp/pbhostile-{uid}/a b;c $(touch {canary}) `touch {canary}` 'q' \"dq\" "
            f"$HOME;touch {canary} && touch {canary} | touch {canary} > x")
    label = f"x'; touch {canary}; echo \"$(touch {canary})\" `touch {canary}` ${{IFS}}%n $HOME"
    unit = f"pbhostile-{uid}.service"
    books = tmp_path / "books"
    (books / "templates").mkdir(parents=True)
    (books / "templates" / "hostile.conf.j2").write_text(HOSTILE_TEMPLATE)
    (books / "templates" / "hostile.service.j2").write_text(HOSTILE_UNIT)
    book = books / "hostile.yaml"
    book.write_text(HOSTILE_PLAYBOOK)
    inventory = write_inventory(lab, tmp_path / "inv.yaml", deploy={"root": root},
                                custom={"label": label})
    assert load_inventory(inventory).deploy.root == root
    try:
        code, report = play(book, inventory, "-e", f"uid={uid}")
        assert code == 0, json.dumps(report, indent=1)[:3000]
        d = f"{root}/d"
        for node in lab.nodes:
            def literal(path: str) -> bool:
                # argv straight to test(1) through nsenter: no shell on our side either
                return lab.exec(node.name, ["test", "-e", path], check=False).returncode == 0

            def read(path: str) -> str:
                return lab.exec(node.name, ["cat", path]).stdout

            safe = label.replace("/", "_")
            assert literal(d) and literal(f"{d}/f-{safe}") and literal(f"{d}/cmd-{safe}")
            assert read(f"{d}/t.conf") == f"label={label}\nroot={root}\n"
            assert read(f"{d}/c.txt") == label
            assert read(f"{d}/sh.txt") == label
            assert read(f"{d}/unit-ran") == label    # systemd passed it as one literal word
            assert lab.exec(node.name, ["readlink", f"{d}/link"]).stdout.strip() == \
                f"{d}/t.conf"
            assert not literal(canary), f"canary created on {node.name}"
        assert not Path(canary).exists()
    finally:
        for node in lab.nodes:
            lab.exec(node.name, ["sh", "-c", 'systemctl stop -- "$1"; rm -f -- '
                                 '"/etc/systemd/system/$1"; systemctl daemon-reload; '
                                 'rm -rf -- "$2"', "cleanup", unit,
                                 f"/tmp/pbhostile-{uid}"], check=False)


@pytest.mark.parametrize("mutation,field", [
    (lambda d: d["all"]["children"]["nodes"]["hosts"].update(
        {"n;touch /tmp/x": d["all"]["children"]["nodes"]["hosts"].pop("node1")}),
     "all.children.nodes.hosts['n;touch /tmp/x']"),
    (lambda d: d["all"]["vars"].update(deploy={"root": "/tmp/a\ntouch /tmp/x"}),
     "all.vars.deploy.root"),
    (lambda d: d["all"]["vars"]["ssh"].update(user="root;id"), "all.vars.ssh.user"),
    (lambda d: d["all"]["children"]["nodes"]["hosts"]["node0"].update(
        ansible_host="198.18.0.1;id"), "all.children.nodes.hosts.node0.ansible_host"),
])
def test_hostile_names_are_rejected_before_any_connection(lab, tmp_path, mutation, field):
    data = yaml.safe_load(Path(lab.inventory_path).read_text())
    data["all"]["vars"].setdefault("model", {"path": "/srv/m"})
    mutation(data)
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(InputError) as info:
        load_inventory(path)
    assert info.value.field == field
    book = tmp_path / "p.yaml"
    book.write_text(textwrap.dedent("""
        - hosts: all
          tasks: [{ping: {}}]
        """))
    proc = subprocess.run([sys.executable, "-m", "ascendctl", "play", str(book), "-i",
                           str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""


def test_ctrl_c_stops_the_run_and_reports_what_ran(lab, tmp_path):
    import signal
    import time

    book = tmp_path / "slow.yaml"
    book.write_text(textwrap.dedent("""
        - hosts: all
          tasks:
            - name: quick
              command: [hostname]
              changed_when: false
            - name: slow
              command: [sleep, "60"]
            - name: never reached
              command: [hostname]
        """))
    inventory = write_inventory(lab, tmp_path / "inv.yaml")
    proc = subprocess.Popen([sys.executable, "-m", "ascendctl", "play", str(book), "-i",
                             str(inventory)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        # wait (however loaded the machine is) until every node is inside `sleep 60`
        deadline = time.monotonic() + 120
        while not any("TASK [slow]" in line for line in lines):
            assert time.monotonic() < deadline and proc.poll() is None, "".join(lines)
            time.sleep(0.1)
        time.sleep(1)
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)
        reader.join(timeout=10)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    out = "".join(lines)
    assert time.monotonic() - started < 10
    assert proc.returncode == 130, err
    assert "TASK [quick]" in out and "never reached" not in out
    assert "RECAP" in out and "interrupted" in out
    for node in lab.nodes:
        assert f"{node.name}  ok=1" in out
