"""Fault injection: each kind puts a node in a state that the real commands show exactly
as on real hardware (`npu-smi`, `hccn_tool`, `ip`, `df`, `ssh`, `date`, `lspci`, version
files); `heal` returns the node to its provisioned baseline."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from ascendctl.errors import InputError
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
    "npu-missing": "fewer NPUs than expected: the driver reports [VALUE=npus-1] NPUs",
    "hbm-leftover": "a real leftover process holds 59017 MB HBM on NPU [VALUE=0] "
                    "(its PID is in npu-smi's process table)",
    "roce-link-down": "RoCE port [VALUE=0] link down (real `ip link set down`)",
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
    "clock-skew": "system clock off by [VALUE=+300] seconds (libfaketime in /etc/ld.so.preload)",
    "bios-sriov-on": "SR-IOV enabled in BIOS: `lspci -vvv` shows IOVCtl Enable+ and 16 VFs "
                     "on the 19e5:d802 NPUs",
    "bios-acs-on": "ACS enabled in BIOS: `lspci -vvv` shows ACSCtl SrcValid+ ReqRedir+ "
                   "CmpltRedir+ on the NPUs' root ports",
    "bios-above4g-off": "Above-4G decoding off: the NPUs' 64-bit BARs are <unassigned> "
                        "[disabled] in `lspci -v`",
}

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


def _link_event(state: dict, port: int, up: bool) -> None:
    state.setdefault("link_history", {}).setdefault(str(port), []).append(
        {"time": time.time(), "up": up})


def inject(lab: Lab, node: str, kind: str, value: str | None = None) -> str:
    if kind not in FAULT_KINDS:
        raise InputError(f"unknown fault kind {kind!r}; kinds: {', '.join(FAULT_KINDS)}",
                         field="KIND")
    target = lab.node(node)
    npus = lab.npus_per_node
    if kind == "power-off":
        lab.power_off(node)
        return f"{node} powered off"
    if not target.running:
        raise InputError(f"{node} is powered off; `lab heal {node}` first", field="NODE")
    state = _read_state(lab, node)
    netns = target.netns
    port = 0                     # only the per-port kinds below use it (from VALUE)
    if kind in ("npu-unhealthy", "hbm-leftover", "roce-link-down", "device-ip-missing",
                "device-ip-duplicate", "net-health-fail", "netdetect-missing"):
        raw = value.split(":", 1)[0] if value else None
        port = _int(raw, 0, kind, 0, npus - 1)

    if kind == "firmware-incompatible":
        state["firmware"] = dict(FIRMWARE_OLD)
    elif kind == "cann-incompatible":
        state["toolkit"] = dict(TOOLKIT_OLD)
        state["toolkit_running"] = TOOLKIT_OLD_RUNNING
    elif kind == "cann-missing":
        state["toolkit"] = None
    elif kind == "driver-old":
        state["driver"] = dict(DRIVER_OLD)
        state["npu_smi_version"] = DRIVER_OLD["Version"]
    elif kind == "driver-not-loaded":
        state["driver_loaded"] = False
    elif kind == "npu-unhealthy":
        level = value.split(":", 1)[1] if value and ":" in value else "Alarm"
        if level not in ("Warning", "Alarm", "Critical"):
            raise InputError(f"health must be Warning, Alarm or Critical, got {level!r}",
                             field="VALUE")
        npu = state["npus"][port]
        npu["health"] = level
        if level == "Warning":
            npu["error_codes"] = list(sim_state.WARNING_ERROR_CODES)
            npu["error_info"] = list(sim_state.WARNING_ERROR_INFO)
        else:
            npu["error_codes"] = list(sim_state.ALARM_ERROR_CODES)
            npu["error_info"] = list(sim_state.ALARM_ERROR_INFO)
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
    elif kind == "tls-mismatch":
        for npu in state["npus"]:
            npu["tls"] = 1
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
    elif kind == "bios-sriov-on":
        state["bios"]["sriov"] = True
    elif kind == "bios-acs-on":
        state["bios"]["acs"] = True
    elif kind == "bios-above4g-off":
        state["bios"]["above4g"] = False
    _write_state(lab, node, state)
    return f"{node}: {kind}" + (f"={value}" if value else "")


def heal(lab: Lab, node: str) -> None:
    """Undo every fault on NODE: back to the state it was provisioned with."""
    target = lab.node(node)
    if not target.running:
        lab.power_on(node)
        target = lab.node(node)
    baseline = json.loads((target.upper.parent / "baseline-state.json").read_text())
    current = _read_state(lab, node)
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
    baseline["link_history"] = history
    for port, was_up in links_before.items():
        if not was_up:
            _link_event(baseline, port, True)
    _write_state(lab, node, baseline)


def _link_up(netns: str, port: int) -> bool:
    out = net.run(["ip", "-n", netns, "-j", "link", "show", "dev",
                   f"{net.ROCE_IFPREFIX}{port}"], check=False).stdout
    return bool(out) and "UP" in json.loads(out)[0].get("flags", [])


def describe() -> str:
    width = max(len(k) for k in FAULT_KINDS)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in FAULT_KINDS.items())


__all__ = ["FAULT_KINDS", "inject", "heal", "describe"]
