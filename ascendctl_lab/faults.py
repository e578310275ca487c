"""Fault injection: each kind puts a node in a state that the real commands show exactly
as on real hardware (`npu-smi`, `hccn_tool`, `ip`, `df`, `ssh`, `date`, `lspci`, version
files); `heal` returns the node to its provisioned baseline. The engine kinds
(ENGINE_FAULT_KINDS) act on the serving engine from its next start instead
(ascendctl_lab/engine_faults.py, the node's side)."""

from __future__ import annotations

import ipaddress
import json
import math
import os
import time
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ascendctl.errors import InputError
from ascendctl_lab import engine_faults as node_engine
from ascendctl_lab import network as net
from ascendctl_lab.provision import hccn_conf
from ascendctl_lab.sim import state as sim_state

if TYPE_CHECKING:
    from ascendctl_lab.lab import Lab

STATE_FILE = "/etc/ascend-sim/state.json"
LEFTOVER_UNIT = "ascend-leftover-npu"
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
# sshd's seccomp-sandboxed pre-auth child dies (SIGSYS) with libfaketime loaded: sshd is
# exempted so that SSH still works and the sessions it starts see the skewed clock.
SSHD_FAKETIME_DROPIN = "/etc/systemd/system/ssh.service.d/ascendctl-faketime.conf"
DEPLOY_ROOT = "/var/lib/ascendctl"
LEFTOVER_MB = 59017
FLAP_UNIT = "ascend-roce-flap"
FLAP_DOWN_S, FLAP_UP_S = 2, 3
# The flap loop (argv: ifname, events file, then subnet, address, table to restore the
# port's source route after each up, as the lab's routing needs). On stop (SIGTERM) it
# finishes its cycle: the port ends up, its last change recorded.
FLAP_SCRIPT = f"""trap 'stop=1' TERM
while :; do
  ip link set dev "$1" down && echo "$(date +%s.%N) 0" >> "$2"
  sleep {FLAP_DOWN_S}
  ip link set dev "$1" up && echo "$(date +%s.%N) 1" >> "$2"
  [ -z "$3" ] || ip route replace "$3" dev "$1" src "$4" table "$5"
  [ -n "$stop" ] && exit 0
  sleep {FLAP_UP_S}
  [ -n "$stop" ] && exit 0
done
"""
SPIKE_C = 105
PLOG_DIR = "/root/ascend/log/debug/plog"
# The EI0013 text of vllm-ascend#7384 (tests/fixtures/fault_log_lines.txt), behind a plog
# line's `[ERROR] HCCL(pid,python):<time>` prefix (the plog line of the same file);
# written by python3 on the node, so the name carries the writing process's PID:
# plog-<pid>_<YYYYmmddHHMMSSmmm>.log. argv: directory, then the line's text.
PLOG_TEXT = ("Execution_Error_ROCE_CQE(EI0013): An error CQE occurred during operator "
             "execution. Local information: server {server}, device ID {dev}, device IP "
             "{ip}. Peer information: server {peer_server}, device ID {dev}, device IP "
             "{peer_ip}.")
PLOG_WRITER = """import os, sys, time
now = time.time(); local = time.localtime(now); us = int(now * 1e6) % 1000000
pid = os.getpid()
os.makedirs(sys.argv[1], exist_ok=True)
path = "%s/plog-%d_%s%03d.log" % (sys.argv[1], pid, time.strftime("%Y%m%d%H%M%S", local), us // 1000)
stamp = "%s.%03d.%03d" % (time.strftime("%Y-%m-%d-%H:%M:%S", local), us // 1000, us % 1000)
with open(path, "a") as handle:
    handle.write("[ERROR] HCCL(%d,python):%s %s\\n" % (pid, stamp, sys.argv[2]))
print(path)
"""
ENGINE_UNIT = "ascendctl-engine.service"

# kind -> one-line description (VALUE and its default in brackets).
FAULT_KINDS: dict[str, str] = {
    "firmware-incompatible": "NPU firmware 6.4.0.4.220, outside the driver's "
                             "compatible_version_fw range (firmware not upgraded with the driver)",
    "cann-incompatible": "CANN toolkit 8.0.RC1 whose compatible_version does not list the "
                         "driver's Innerversion (C23)",
    "cann-missing": "no CANN toolkit: /usr/local/Ascend/ascend-toolkit is absent",
    "driver-old": "driver 24.1.rc2 (Innerversion C17), which neither the node's CANN 8.5.1 "
                  "nor the lab engine image's lists in compatible_version",
    "driver-not-loaded": "npu-smi fails: 'dcmi module initialize failed. ret is -8005' "
                         "(driver upgraded without a reboot)",
    "npu-unhealthy": "NPU [VALUE=0] reports Alarm with error codes; VALUE 'N:Warning' for Warning",
    "chip-alarm": "NPU [VALUE=0] health Alarm with error code 80E01801 (HBM multi-bit error "
                  "on access; policy defaults: RestartBusiness -> restart)",
    "ecc-singlebit": "NPU [VALUE=0]: HBM single-bit (corrected) ECC count and its aggregate "
                     "total +1 per injection (`npu-smi info -t ecc`)",
    "ecc-multibit": "NPU [VALUE=0]: HBM double-bit (uncorrectable) ECC count and its "
                    "aggregate total +1 per injection (`npu-smi info -t ecc`)",
    "temp-spike": f"NPU [VALUE=0] reads {SPIKE_C} C for one `npu-smi info -t temp` read (the "
                  "main table and -t common in the same reading), then normal",
    "npu-missing": "fewer NPUs than expected: the driver reports [VALUE=npus-1] NPUs",
    "hbm-leftover": "a real leftover process holds 59017 MB HBM on NPU [VALUE=0] "
                    "(its PID is in npu-smi's process table)",
    "roce-link-down": "RoCE port [VALUE=0] link down (real `ip link set down`)",
    "roce-flap": f"RoCE port [VALUE=0] flaps until `lab heal`: {FLAP_DOWN_S} s down, "
                 f"{FLAP_UP_S} s up (real `ip link set`; link_stat counters and records)",
    "mtu-mismatch": "every RoCE port of the node at MTU [VALUE=1500] instead of the lab's "
                    "(real interface MTU)",
    "device-ip-missing": "RoCE port [VALUE=0] has no device IP (interface and /etc/hccn.conf)",
    "device-ip-duplicate": "RoCE port [VALUE=0] carries the device IP of the same port on the "
                           "next node (or of the next port on a one-node lab)",
    "tls-mismatch": "TLS switch enabled on every RoCE port of this node (the others: disabled)",
    "net-health-fail": "net_health of port [VALUE=0] is 'Receive timeout': its netdetect "
                       "address answers no ping",
    "netdetect-missing": "no netdetect address on port [VALUE=0]: net_health 'Init'",
    "disk-small": "deploy root /var/lib/ascendctl on a small filesystem of [VALUE=64M] "
                  "(tmpfs; `df` shows it)",
    "sshd-down": "sshd stopped (the node still runs; `lab exec` still works)",
    "power-off": "node powered off (container stopped, its addresses gone)",
    "plog-error": "an Execution_Error_ROCE_CQE(EI0013) line in a new CANN plog file "
                  f"{PLOG_DIR}/plog-<pid>_<time>.log",
    "engine-hang": f"the engine hangs: SIGSTOP to every process of {ENGINE_UNIT} (refused "
                   "if it is not running); heal sends SIGCONT",
    "clock-skew": "system clock off by [VALUE=+300] seconds (libfaketime in /etc/ld.so.preload)",
    "bios-sriov-on": "SR-IOV enabled in BIOS: `lspci -vvv` shows IOVCtl Enable+ and 16 VFs "
                     "on the 19e5:d802 NPUs",
    "bios-acs-on": "ACS enabled in BIOS: `lspci -vvv` shows ACSCtl SrcValid+ ReqRedir+ "
                   "CmpltRedir+ on the NPUs' root ports",
    "bios-above4g-off": "Above-4G decoding off: the NPUs' 64-bit BARs are <unassigned> "
                        "[disabled] in `lspci -v`",
}

# The engine's faults: kind -> one-line description, as FAULT_KINDS. Each acts from the
# engine's next start on that node (a deploy that starts it, a restart), never on the
# running one, and `lab heal` clears it for the start after (engine_faults.py, docs/lab.md).
_NEXT_START = ("; acts from the engine's next start; after `lab heal` the running engine "
               "keeps it until it restarts")
ENGINE_FAULT_KINDS: dict[str, str] = {
    "engine-slow": "the engine's processes together get [VALUE=25] % of one CPU (a CPU "
                   "quota: stopped while over it)" + _NEXT_START,
    "engine-garbage": "a fraction [VALUE=0.02, at most 0.5] of the completions has garbage "
                      "text (every 50th since the API server started at 0.02; streamed "
                      "too)" + _NEXT_START,
    "engine-leak": "a thread of the API server allocates and keeps [VALUE=8] MiB/s of host "
                   "memory, up to 4 GiB" + _NEXT_START,
    "engine-stall": "a completion arriving while [VALUE=4] or more are served hangs until "
                    "its client goes away (503 after 600 s); 1-token probes pass" + _NEXT_START,
}
ENGINE_SLOW_PERCENT, ENGINE_GARBAGE_FRACTION, ENGINE_LEAK_MIB_S, ENGINE_STALL_IN_FLIGHT = (
    25, "0.02", 8.0, 4)
ENGINE_LEAK_MAX_MIB_S = 1024.0
ENGINE_STALL_MAX = 4096

FIRMWARE_OLD = {"Version": "6.4.0.4.220", "firmware_version": "1.0",
                "package_version": "23.0.3", "compatible_version_drv": "[23.0,23.0.]"}
TOOLKIT_OLD = {"package_name": "Ascend-cann-toolkit", "version": "8.0.RC1",
               "innerversion": "V100R001C17SPC001B224",
               "compatible_version": "[V100R001C13],[V100R001C15],[V100R001C17]",
               "arch": "x86_64", "os": "linux",
               "path": "/usr/local/Ascend/ascend-toolkit/8.0.RC1/x86_64-linux"}
TOOLKIT_OLD_RUNNING = "7.2.0.1.101:8.0.RC1"
# An older driver the firmware still accepts (its compatible_version_drv lists 24.1), whose
# Innerversion code no CANN 8.5.1 toolkit lists: the lab's own choice of values, in the
# format of the 25.3.rc1 capture.
DRIVER_OLD = {**sim_state.DEFAULT_DRIVER, "Version": "24.1.rc2", "package_version": "24.1.rc2",
              "Innerversion": "V100R001C17SPC001B224",
              "compatible_version": "[V100R001C13],[V100R001C15],[V100R001C17]"}


def _int(value: str | None, default: int, what: str, low: int = 0, high: int = 10**6) -> int:
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise InputError(f"{what}: expected a number, got {value!r}", field="VALUE") from None
    if not low <= number <= high:
        raise InputError(f"{what}: must be between {low} and {high}", field="VALUE")
    return number


def engine_fault_params(kind: str, value: str | None) -> dict:
    """The parameters of engine fault KIND from VALUE (its default when None), as the
    node's engine_faults module reads them; InputError (field VALUE) when out of range."""
    if kind == "engine-slow":
        return {"cpu_percent": _int(value, ENGINE_SLOW_PERCENT, kind, 1,
                                    100 * (os.cpu_count() or 1))}
    if kind == "engine-garbage":
        text = (value if value is not None else ENGINE_GARBAGE_FRACTION).strip()
        try:
            fraction = Fraction(text)
        except (ValueError, ZeroDivisionError):
            raise InputError(f"{kind}: expected a fraction like 0.02, got {value!r}",
                             field="VALUE") from None
        if not 0 < fraction <= Fraction(1, 2):
            raise InputError(f"{kind}: the fraction must be above 0 and at most 0.5, got "
                             f"{value!r}", field="VALUE")
        return {"fraction": text}
    if kind == "engine-leak":
        try:
            rate = float(value) if value is not None else ENGINE_LEAK_MIB_S
        except ValueError:
            raise InputError(f"{kind}: expected MiB per second (a number), got {value!r}",
                             field="VALUE") from None
        if not math.isfinite(rate) or not 0 < rate <= ENGINE_LEAK_MAX_MIB_S:
            raise InputError(f"{kind}: MiB per second must be above 0 and at most "
                             f"{ENGINE_LEAK_MAX_MIB_S:g}, got {value!r}", field="VALUE")
        return {"mib_per_s": rate}
    if kind == "engine-stall":
        return {"in_flight": _int(value, ENGINE_STALL_IN_FLIGHT, kind, 1, ENGINE_STALL_MAX)}
    raise InputError(f"{kind!r} is not an engine fault; engine faults: "
                     f"{', '.join(ENGINE_FAULT_KINDS)}", field="KIND")


def _inject_engine_fault(lab: Lab, node: str, kind: str, params: dict) -> str:
    """The node's module in place, the kind merged into its fault file and the
    sitecustomize block added: the engine's next start acts on it."""
    source = Path(node_engine.__file__).read_text()
    lab.exec(node, ["sh", "-c", 'mkdir -p "$1" && cat > "$2.new" && mv "$2.new" "$2"',
                    "engine-fault", node_engine.NODE_DIR, node_engine.NODE_MODULE],
             input=source)
    lab.exec(node, ["python3", "-I", "-S", node_engine.NODE_MODULE, "add", kind,
                    json.dumps(params)])
    shown = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in params.items())
    return (f"{node}: {kind} ({shown}) from the engine's next start; a running engine "
            f"keeps what it started with")


def _heal_engine_faults(lab: Lab, node: str) -> None:
    module = node_engine.NODE_MODULE
    lab.exec(node, ["sh", "-c", f"if [ -f {module} ]; then python3 -I -S {module} uninstall; "
                                f"fi; rm -rf {node_engine.NODE_DIR}; "
                                f"rm -f {node_engine.FAULT_FILE}"])


def _read_state(lab: Lab, node: str) -> dict:
    return json.loads(lab.exec(node, ["cat", STATE_FILE]).stdout)


def _write_state(lab: Lab, node: str, state: dict) -> None:
    lab.exec(node, ["sh", "-c", f"cat > {STATE_FILE}.new && mv {STATE_FILE}.new {STATE_FILE}"],
             input=json.dumps(state, indent=1) + "\n")
    lab.exec(node, ["ascend-sim", "sync"])


def _edit_conf(lab: Lab, node: str, changes: dict[str, str | None]) -> None:
    text = lab.exec(node, ["cat", "/etc/hccn.conf"]).stdout
    lines = [ln for ln in text.splitlines() if ln.split("=", 1)[0] not in changes]
    lines += [f"{k}={v}" for k, v in changes.items() if v is not None]
    lab.exec(node, ["sh", "-c", "cat > /etc/hccn.conf"], input="\n".join(lines) + "\n")


def _health(npu: dict, level: str, codes: list[str], infos: list) -> None:
    npu["health"] = level
    npu["error_codes"] = list(codes)
    npu["error_info"] = list(infos)


def _ecc_error(prefix: str) -> Callable[[dict, int], None]:
    """One more HBM ECC error: the current count and the lifetime total."""
    def edit(state: dict, npu: int) -> None:
        counts = state["npus"][npu].setdefault("hbm_ecc", {})
        for field in (prefix, f"{prefix}_total"):
            counts[field] = int(counts.get(field, 0)) + 1
    return edit


def _set(**values: object) -> Callable[[dict, int], None]:
    def edit(state: dict, _unit: int) -> None:
        for key, value in values.items():
            state[key] = json.loads(json.dumps(value))     # a copy
    return edit


def _bios(flag: str, value: bool) -> Callable[[dict, int], None]:
    def edit(state: dict, _unit: int) -> None:
        state["bios"][flag] = value
    return edit


def _tls_on(state: dict, _unit: int) -> None:
    for npu in state["npus"]:
        npu["tls"] = 1


# The kinds that only edit the node state: kind -> edit(state, NPU or port from VALUE).
STATE_EDITS: dict[str, Callable[[dict, int], None]] = {
    "firmware-incompatible": _set(firmware=FIRMWARE_OLD),
    "cann-incompatible": _set(toolkit=TOOLKIT_OLD, toolkit_running=TOOLKIT_OLD_RUNNING),
    "cann-missing": _set(toolkit=None),
    "driver-old": _set(driver=DRIVER_OLD, npu_smi_version=DRIVER_OLD["Version"]),
    "driver-not-loaded": _set(driver_loaded=False),
    "chip-alarm": lambda state, npu: _health(state["npus"][npu], "Alarm",
                                             sim_state.CHIP_ALARM_ERROR_CODES,
                                             sim_state.CHIP_ALARM_ERROR_INFO),
    "ecc-singlebit": _ecc_error("single_bit"),
    "ecc-multibit": _ecc_error("multi_bit"),
    "tls-mismatch": _tls_on,
    "bios-sriov-on": _bios("sriov", True),
    "bios-acs-on": _bios("acs", True),
    "bios-above4g-off": _bios("above4g", False),
}


def _start_flap(lab: Lab, node: str, port: int) -> str:
    unit = f"{FLAP_UNIT}{port}"
    if lab.exec(node, ["systemctl", "is-active", "--quiet", unit], check=False).returncode == 0:
        return f"{node}: RoCE port {port} is already flapping"
    ifname = f"{net.ROCE_IFPREFIX}{port}"
    route: list[str] = ["", "", ""]
    address = lab.node(node).device_ips[port]
    if address:
        subnet = str(ipaddress.ip_interface(f"{address}/24").network)
        route = [subnet, address, str(net.port_table(port))]
    lab.exec(node, ["mkdir", "-p", sim_state.LINK_EVENTS_DIR])
    lab.exec(node, ["systemd-run", f"--unit={unit}", "--quiet", "--collect", "/bin/sh", "-c",
                    FLAP_SCRIPT, unit, ifname, f"{sim_state.LINK_EVENTS_DIR}/{port}", *route])
    return (f"{node}: RoCE port {port} flaps ({FLAP_DOWN_S} s down, {FLAP_UP_S} s up) "
            f"until `lab heal {node}`")


def _write_plog(lab: Lab, node: str) -> str:
    nodes = lab.nodes
    target = lab.node(node)
    peer = nodes[(target.rank + 1) % len(nodes)]
    peer_port = 0 if peer.rank != target.rank else 1 % len(target.device_ips)
    text = PLOG_TEXT.format(server=target.mgmt_ip, dev=0, ip=target.device_ips[0],
                            peer_server=peer.mgmt_ip, peer_ip=peer.device_ips[peer_port])
    return lab.exec(node, ["python3", "-c", PLOG_WRITER, PLOG_DIR, text]).stdout.strip()


def _stop_engine(lab: Lab, node: str) -> list[dict]:
    """SIGSTOP every process of the engine unit (the launcher and the vLLM processes it
    started): the engine hangs as a whole, its sockets still accept connections."""
    shown = lab.exec(node, ["systemctl", "show", "-p", "MainPID", "--value", ENGINE_UNIT],
                     check=False).stdout.strip()
    if not shown.isdigit() or int(shown) == 0:
        raise InputError(f"{node}: {ENGINE_UNIT} is not running (MainPID {shown or 'none'}); "
                         "deploy an engine first", field="NODE")
    pids = _descendants(lab, node, int(shown))
    records = [{"pid": pid, "start": _start_time(lab, node, pid)} for pid in pids]
    lab.exec(node, ["kill", "-STOP", *(str(pid) for pid in pids)], check=False)
    return records


def _descendants(lab: Lab, node: str, root: int) -> list[int]:
    """ROOT and every process below it (the node's process table, `ps -e -o pid=,ppid=`)."""
    children: dict[int, list[int]] = {}
    for line in lab.exec(node, ["ps", "-e", "-o", "pid=,ppid="]).stdout.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0].isdigit() and fields[1].isdigit():
            children.setdefault(int(fields[1]), []).append(int(fields[0]))
    found, pending = [], [root]
    while pending:
        pid = pending.pop()
        if pid not in found:
            found.append(pid)
            pending += children.get(pid, [])
    return sorted(found)


def _start_time(lab: Lab, node: str, pid: int) -> str | None:
    """Field 22 of /proc/PID/stat (the start time): tells a reused PID apart."""
    stat = lab.exec(node, ["cat", f"/proc/{pid}/stat"], check=False).stdout
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def _link_event(state: dict, port: int, up: bool) -> None:
    state.setdefault("link_history", {}).setdefault(str(port), []).append(
        {"time": time.time(), "up": up})


def inject(lab: Lab, node: str, kind: str, value: str | None = None) -> str:
    if kind not in FAULT_KINDS and kind not in ENGINE_FAULT_KINDS:
        raise InputError(f"unknown fault kind {kind!r}; kinds: "
                         f"{', '.join([*FAULT_KINDS, *ENGINE_FAULT_KINDS])}", field="KIND")
    engine_params = engine_fault_params(kind, value) if kind in ENGINE_FAULT_KINDS else None
    target = lab.node(node)
    npus = lab.npus_per_node
    if kind == "power-off":
        lab.power_off(node)
        return f"{node} powered off"
    if not target.running:
        raise InputError(f"{node} is powered off; `lab heal {node}` first", field="NODE")
    if engine_params is not None:
        return _inject_engine_fault(lab, node, kind, engine_params)
    state = _read_state(lab, node)
    netns = target.netns
    port = 0                     # only the per-port kinds below use it (from VALUE)
    if kind in PER_UNIT_KINDS:
        raw = value.split(":", 1)[0] if value else None
        port = _int(raw, 0, kind, 0, npus - 1)
    elif kind in NO_VALUE_KINDS and value is not None:
        raise InputError(f"{kind} takes no VALUE, got {value!r}", field="VALUE")

    if kind in STATE_EDITS:
        STATE_EDITS[kind](state, port)
    elif kind == "npu-unhealthy":
        level = value.split(":", 1)[1] if value and ":" in value else "Alarm"
        if level not in ("Warning", "Alarm", "Critical"):
            raise InputError(f"health must be Warning, Alarm or Critical, got {level!r}",
                             field="VALUE")
        if level == "Warning":
            _health(state["npus"][port], level, sim_state.WARNING_ERROR_CODES,
                    sim_state.WARNING_ERROR_INFO)
        else:
            _health(state["npus"][port], level, sim_state.ALARM_ERROR_CODES,
                    sim_state.ALARM_ERROR_INFO)
    elif kind == "temp-spike":
        path = f"{sim_state.SPIKE_DIR}/{port}"
        lab.exec(node, ["sh", "-c", 'mkdir -p "$1" && cat > "$2.new" && mv "$2.new" "$2"',
                        "temp-spike", sim_state.SPIKE_DIR, path], input=f"1 {SPIKE_C} 0\n")
        return f"{node}: NPU {port} reads {SPIKE_C} C at its next `npu-smi info -t temp`"
    elif kind == "npu-missing":
        state["visible_npus"] = _int(value, npus - 1, kind, 0, npus - 1)
    elif kind == "hbm-leftover":
        unit = f"{LEFTOVER_UNIT}{port}"
        lab.exec(node, ["systemd-run", f"--unit={unit}", "--quiet", "/usr/bin/python3", "-c",
                        "import time\nwhile True: time.sleep(3600)"])
        pid = int(lab.exec(node, ["systemctl", "show", "-P", "MainPID", unit]).stdout.strip())
        state["processes"] = [p for p in state.get("processes", []) if p["npu"] != port]
        state["processes"].append({"npu": port, "pid": pid, "mem_mb": LEFTOVER_MB})
        _write_state(lab, node, state)
        return f"{node}: PID {pid} holds {LEFTOVER_MB} MB on NPU {port}"
    elif kind == "roce-link-down":
        net.run(["ip", "-n", netns, "link", "set", f"{net.ROCE_IFPREFIX}{port}", "down"])
        _link_event(state, port, False)
    elif kind == "roce-flap":
        return _start_flap(lab, node, port)
    elif kind == "plog-error":
        path = _write_plog(lab, node)
        state.setdefault("fault_files", []).append(path)
    elif kind == "engine-hang":
        state.setdefault("stopped", []).extend(_stop_engine(lab, node))
    elif kind == "mtu-mismatch":
        mtu = _int(value, 1500, kind, 576, 9000)
        for p in range(npus):
            net.run(["ip", "-n", netns, "link", "set", f"{net.ROCE_IFPREFIX}{p}", "mtu", str(mtu)])
    elif kind == "device-ip-missing":
        net.run(["ip", "-n", netns, "addr", "flush", "dev", f"{net.ROCE_IFPREFIX}{port}"])
        net.flush_port_rules(netns, port)
        _edit_conf(lab, node, {f"address_{port}": None, f"netmask_{port}": None})
    elif kind == "device-ip-duplicate":
        nodes = lab.nodes
        if len(nodes) > 1:
            other = nodes[(target.rank + 1) % len(nodes)]
            duplicate = other.device_ips[port]
        else:
            duplicate = target.device_ips[(port + 1) % npus]
        ifname = f"{net.ROCE_IFPREFIX}{port}"
        net.run(["ip", "-n", netns, "addr", "flush", "dev", ifname])
        net.flush_port_rules(netns, port)
        net.run(["ip", "-n", netns, "addr", "add", f"{duplicate}/24", "dev", ifname])
        _edit_conf(lab, node, {f"address_{port}": duplicate})
    elif kind == "net-health-fail":
        _edit_conf(lab, node, {f"netdetect_{port}": f"198.19.{lab.index}.254"})
    elif kind == "netdetect-missing":
        _edit_conf(lab, node, {f"netdetect_{port}": None})
    elif kind == "disk-small":
        size = value or "64M"
        if not size[:-1].isdigit() or size[-1] not in "KMG":
            raise InputError(f"size like 64M or 1G expected, got {size!r}", field="VALUE")
        lab.exec(node, ["sh", "-c", f"mountpoint -q {DEPLOY_ROOT} || mount -t tmpfs -o "
                                    f"size={size},mode=0755 ascendctl-small {DEPLOY_ROOT}"])
    elif kind == "sshd-down":
        lab.exec(node, ["systemctl", "stop", "ssh.service"])
    elif kind == "clock-skew":
        seconds = _int(value, 300, kind, -10**8, 10**8)
        # sshd must be restarted with the library already preloaded (and skipped)
        lab.exec(node, ["sh", "-c", f"printf '%+ds\\n' {seconds} > /etc/faketimerc && "
                                    f"echo {FAKETIME_LIB} > /etc/ld.so.preload && "
                                    f"mkdir -p {SSHD_FAKETIME_DROPIN.rsplit('/', 1)[0]} && "
                                    "printf '[Service]\\nEnvironment=FAKETIME_SKIP_CMDS=sshd\\n' "
                                    f"> {SSHD_FAKETIME_DROPIN} && systemctl daemon-reload && "
                                    "systemctl restart ssh.service"])
    _write_state(lab, node, state)
    return f"{node}: {kind}" + (f"={value}" if value else "")


def heal(lab: Lab, node: str) -> None:
    """Undo every fault on NODE: back to the state it was provisioned with."""
    target = lab.node(node)
    if not target.running:
        lab.power_on(node)
        target = lab.node(node)
    _heal_engine_faults(lab, node)
    baseline = json.loads((target.upper.parent / "baseline-state.json").read_text())
    current = _read_state(lab, node)
    for stopped in current.get("stopped", []):
        if _start_time(lab, node, int(stopped["pid"])) == stopped["start"]:
            lab.exec(node, ["kill", "-CONT", str(int(stopped["pid"]))], check=False)
    lab.exec(node, ["systemctl", "stop", f"{FLAP_UNIT}*"], check=False, timeout=120)
    flapped = _read_link_events(lab, node)
    files = [str(f) for f in current.get("fault_files", [])
             if str(f).startswith(PLOG_DIR + "/plog-") and "/.." not in str(f)]
    lab.exec(node, ["rm", "-rf", "--", sim_state.SPIKE_DIR, sim_state.LINK_EVENTS_DIR, *files])
    for proc in current.get("processes", []):
        lab.exec(node, ["systemctl", "stop", f"{LEFTOVER_UNIT}{proc['npu']}"], check=False)
    lab.exec(node, ["sh", "-c", "rm -f /etc/ld.so.preload /etc/faketimerc; "
                                f"if [ -e {SSHD_FAKETIME_DROPIN} ]; then rm -f {SSHD_FAKETIME_DROPIN}; "
                                f"rmdir --ignore-fail-on-non-empty {SSHD_FAKETIME_DROPIN.rsplit('/', 1)[0]}; "
                                "systemctl daemon-reload; systemctl try-restart ssh.service; fi; "
                                f"while mountpoint -q {DEPLOY_ROOT}; do "
                                f"umount {DEPLOY_ROOT}; done; systemctl start ssh.service"])
    record = lab._load()
    assert record is not None
    links_before = {p: _link_up(target.netns, p) for p in range(lab.npus_per_node)}
    net.configure_roce(lab.net, target.rank, target.netns, lab.npus_per_node,
                       int(record["roce_mtu"]), dict(enumerate(target.device_ips)))

    lab.exec(node, ["sh", "-c", "cat > /etc/hccn.conf"],
             input=hccn_conf(target.device_ips, net.NETMASK, lab.net.roce_host_ip,
                             lab.net.roce_host_ip))
    history = current.get("link_history", baseline.get("link_history", {}))
    for port, events in flapped.items():
        history[str(port)] = sorted(history.get(str(port), []) + events,
                                    key=lambda r: r["time"])
    baseline["link_history"] = history
    for port, was_up in links_before.items():
        if not was_up:
            _link_event(baseline, port, True)
    _write_state(lab, node, baseline)


def _read_link_events(lab: Lab, node: str) -> dict[int, list[dict]]:
    """The link changes the flap loops recorded, by port."""
    listing = lab.exec(node, ["sh", "-c", 'cd "$1" 2>/dev/null && grep -H "" -- * ; true',
                              "heal", sim_state.LINK_EVENTS_DIR]).stdout
    lines: dict[int, list[str]] = {}
    for line in listing.splitlines():
        name, _, event = line.partition(":")
        if name.isdigit():
            lines.setdefault(int(name), []).append(event)
    out = {}
    for port, events in lines.items():
        parsed = sim_state.parse_link_events("\n".join(events))
        if parsed:
            out[port] = parsed
    return out


def _link_up(netns: str, port: int) -> bool:
    out = net.run(["ip", "-n", netns, "-j", "link", "show", "dev",
                   f"{net.ROCE_IFPREFIX}{port}"], check=False).stdout
    return bool(out) and "UP" in json.loads(out)[0].get("flags", [])


def describe() -> str:
    kinds = {**FAULT_KINDS, **ENGINE_FAULT_KINDS}
    width = max(len(k) for k in kinds)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in kinds.items())


# Kinds whose VALUE is an NPU or port number (default 0), and kinds that take no VALUE.
PER_UNIT_KINDS = ("npu-unhealthy", "chip-alarm", "ecc-singlebit", "ecc-multibit",
                  "temp-spike", "hbm-leftover", "roce-link-down", "roce-flap",
                  "device-ip-missing", "device-ip-duplicate", "net-health-fail",
                  "netdetect-missing")
NO_VALUE_KINDS = ("plog-error", "engine-hang")

__all__ = ["FAULT_KINDS", "ENGINE_FAULT_KINDS", "inject", "heal", "describe"]
