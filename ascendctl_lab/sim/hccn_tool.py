"""`hccn_tool`: the NPU network configuration tool (910B driver), reading and using the
node's real RoCE interfaces: link state, MTU and addresses come from the kernel, ping
sends real ICMP from the port's device IP; configuration comes from /etc/hccn.conf and
the node state file. Output strings follow the 910B hccn_tool source and captures."""

from __future__ import annotations

import sys
import time

from . import state as st

HCCN_CONF = "/etc/hccn.conf"
NET_HEALTH = ("Success", "Socket fail", "Receive timeout", "Unreachable", "Time exceeded",
              "Fault", "Init", "Thread error", "Detect ip set", "Unknown")
USAGE = "Usage: hccn_tool [-i %d] <option> [-g|-s] ...\n"
# The driver keeps this many link change records; its counters count every change
# (hccn_tool/tool.c, struct link_his_stat).
LINK_STAT_MAX_IDX = 10


# ---- pure formatting -------------------------------------------------------------------

def fmt_link(up: bool) -> str:
    return f"link status: {'UP' if up else 'DOWN'}\n"


def fmt_ip(address: str | None, netmask: str | None) -> str:
    if not address:
        return ""
    return f"ipaddr:{address}\nnetmask:{netmask}\n"


def fmt_mtu(mtu: int) -> str:
    return f"mtu:{mtu}\n"


def fmt_net_health(status: str) -> str:
    return f"net health status: {status}\n"


def fmt_netdetect(address: str | None) -> str:
    return f"netdetect addr: {address or ''}\n"


def fmt_gateway(gateway: str | None, port: int) -> str:
    return f"default gateway:{gateway or ''}, Iface:eth{port}\n"


def fmt_tls(dev: int, switch: int) -> str:
    return (f"dev_id:{dev}, tls switch[{switch}](0:disable, 1:enable), tls preconfigured[1]"
            f"(0:non-preset, 1:preset), tls alarm time threshold[60]days\n")


def fmt_ping(dev: int, address: str, times_ms: list[float | None]) -> str:
    lines = [f"device {dev} PING {address}"]
    received = 0
    for seq, value in enumerate(times_ms):
        if value is not None:
            received += 1
            lines.append(f"recv seq={seq},time={value:.6f}ms")
    sent = len(times_ms)
    loss = 100.0 * (sent - received) / sent if sent else 100.0
    lines.append(f"{sent} packets transmitted, {received} received, {loss:.2f}% packet loss")
    return "\n".join(lines) + "\n"


def fmt_link_stat(dev: int, now: float, records: list[dict], with_down_count: bool) -> str:
    """records: [{"time": epoch, "up": bool}] oldest first; the counters count them all,
    the newest LINK_STAT_MAX_IDX are printed, newest first."""
    ups = sum(1 for r in records if r["up"])
    downs = len(records) - ups
    records = records[-LINK_STAT_MAX_IDX:]
    lines = [f"[devid {dev}]current time        : {time.asctime(time.localtime(now))}",
             f"[devid {dev}]link up count       : {ups}"]
    if with_down_count:
        lines.append(f"[devid {dev}]link down count     : {downs}")
    if records:
        lines.append(f"[devid {dev}]link change records :")
        for rec in reversed(records):
            when = time.asctime(time.localtime(rec["time"]))
            lines.append(f"[devid {dev}]    {when}    {'LINK UP' if rec['up'] else 'LINK DOWN'}")
    else:
        lines.append(f"[devid {dev}]link change records : NA")
    return "\n".join(lines) + "\n"


OPTICAL_FIELDS = (
    ("present", "present"), ("temperature", "47 C"), ("high power enable reg", "enabled"),
    ("vendor name", "Hisense"), ("vendor part number", "LMQ8611-PC+"),
    ("vendor serial number", "V8BD6H25033"), ("vendor org unique id", "0xac 0x4a 0x0"),
    ("xsfp identifier", "QSFP+ or later"), ("xsfp wave length", "850 nm"),
    ("manufact date code", "2023.6.18"), ("Vcc", "3262.90 mV"),
    ("Tx Power0", "1.4035 mW"), ("Rx Power0", "1.0189 mW"), ("Tx Power1", "1.3968 mW"),
    ("Rx Power1", "1.0054 mW"), ("Tx Power2", "1.4140 mW"), ("Rx Power2", "0.9907 mW"),
    ("Tx Power3", "1.4988 mW"), ("Rx Power3", "1.0213 mW"), ("Vcc High Thres", "3465.00 mV"),
    ("Vcc Low Thres", "3135.00 mV"), ("Temp High Thres", "70 C"), ("Temp Low Thres", "0 C"),
    ("TxPower High Thres", "3.5481 mW"), ("TxPower Low Thres", "0.2818 mW"),
    ("RxPower High Thres", "3.5481 mW"), ("RxPower Low Thres", "0.1445 mW"),
    ("Tx Bias0", "7.9360 mA"), ("Tx Bias1", "7.9280 mA"), ("Tx Bias2", "7.9360 mA"),
    ("Tx Bias3", "7.9240 mA"), ("Tx Los Flag", "0x0"), ("Rx Los Flag", "0x0"),
    ("Tx LoL Flag", "0x0"), ("Rx LoL Flag", "0x0"), ("Host SNR Lane0", "not supported"),
    ("Host SNR Lane1", "not supported"), ("Host SNR Lane2", "not supported"),
    ("Host SNR Lane3", "not supported"), ("Media SNR Lane0", "23.1211 dB"),
    ("Media SNR Lane1", "22.6289 dB"), ("Media SNR Lane2", "22.1875 dB"),
    ("Media SNR Lane3", "23.2969 dB"),
)


def fmt_optical(values: dict[str, str] | None = None) -> str:
    merged = dict(OPTICAL_FIELDS)
    merged.update(values or {})
    lines = ["optical info:"] + [f"{key:<21}: {merged[key]}" for key, _ in OPTICAL_FIELDS]
    return "\n".join(lines) + "\n"


def fmt_lldp(chassis_mac: str, port_ifname: str, mgmt_ip: str, max_frame: int) -> str:
    return ("Chassis ID TLV\n"
            f"\tMAC: {chassis_mac}\n"
            "Port ID TLV\n"
            f"\tIfname: {port_ifname}\n"
            "System Description TLV\n"
            "\tVersatile Routing Platform Software\n"
            "VRP (R) software, Version 8.211 (DX511 V200R021C10SPC600)\n"
            "\n"
            "Huarong DX511\n"
            "\n"
            "System Capabilities TLV\n"
            "\tEnabled capabilities: Bridge, Router\n"
            "Management Address TLV\n"
            f"\tIPv4: {mgmt_ip}\n"
            "Maximum Frame Size TLV\n"
            f"\t{max_frame}\n"
            "End of LLDPDU TLV\n")


# ---- the node: hccn.conf and the real interfaces ---------------------------------------

def parse_conf(text: str) -> dict[str, str]:
    conf = {}
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            conf[key.strip()] = value.strip()
    return conf


def read_conf(path: str = HCCN_CONF) -> dict[str, str]:
    try:
        with open(path) as handle:
            return parse_conf(handle.read())
    except OSError:
        return {}


SIOCGIFADDR, SIOCGIFNETMASK = 0x8915, 0x891B


def _ipv4(ifname: str) -> tuple[str | None, int | None]:
    """The interface's primary IPv4 address and prefix length (the kernel's, by ioctl)."""
    import _socket     # socket.py would import enum (and re): too slow per call
    import fcntl

    request = ifname.encode()[:15].ljust(40, b"\0")    # struct ifreq
    sock = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)
    try:
        address = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, request)[20:24]
        netmask = fcntl.ioctl(sock.fileno(), SIOCGIFNETMASK, request)[20:24]
    except OSError:      # no IPv4 address on it
        return None, None
    finally:
        sock.close()
    return ".".join(map(str, address)), bin(int.from_bytes(netmask, "big")).count("1")


def iface_info(ifname: str) -> dict | None:
    """Link state, MTU, MAC and address of a real interface (None if it does not exist)."""
    base = f"/sys/class/net/{ifname}"
    try:
        with open(f"{base}/operstate") as operstate, open(f"{base}/mtu") as mtu, \
                open(f"{base}/address") as mac:
            up, mtu_value, mac_value = (operstate.read().strip() == "up", int(mtu.read()),
                                        mac.read().strip())
    except (OSError, ValueError):
        return None
    address, prefixlen = _ipv4(ifname)
    return {"up": up, "mtu": mtu_value, "address": address, "prefixlen": prefixlen,
            "mac": mac_value}


def prefix_to_mask(prefixlen: int) -> str:
    bits = (0xFFFFFFFF << (32 - prefixlen)) & 0xFFFFFFFF
    return ".".join(str((bits >> s) & 0xFF) for s in (24, 16, 8, 0))


def real_ping(source: str | None, target: str, count: int = 3) -> list[float | None]:
    if not source:
        return [None] * count
    import re
    import subprocess

    proc = subprocess.run(["ping", "-n", "-c", str(count), "-i", "0.2", "-W", "1", "-I",
                           source, target], capture_output=True, text=True)
    times: list[float | None] = [None] * count
    for match in re.finditer(r"icmp_seq=(\d+) .*?time=([\d.]+) ms", proc.stdout):
        seq = int(match.group(1)) - 1
        if 0 <= seq < count:
            times[seq] = float(match.group(2))
    return times


def net_health(npu: dict, info: dict | None, conf: dict[str, str], port: int) -> str:
    if npu.get("net_health"):
        return npu["net_health"]
    detect = conf.get(f"netdetect_{port}")
    if not detect:
        return "Init"
    if not info or not info["up"] or not info["address"]:
        return "Fault"
    return "Success" if real_ping(info["address"], detect, 1)[0] is not None else "Receive timeout"


def run(argv: list[str], state: dict) -> tuple[int, str]:
    if len(argv) < 3 or argv[0] != "-i":
        return 1, USAGE
    try:
        dev = int(argv[1])
    except ValueError:
        return 1, USAGE
    if not state.get("driver_loaded", True):
        return 1, "dsmi_get_device_info failed, ret = -8005\n"
    npu = next((n for n in st.visible(state) if n["id"] == dev), None)
    if npu is None:
        return 1, f"Invalid device id[{dev}].\n"
    option, rest = argv[2], argv[3:]
    if option == "-ping":
        if rest[:2] != ["-g", "address"] or len(rest) < 3:
            return 1, USAGE
        ifname = f"{state['roce']['iface_prefix']}{dev}"
        info = iface_info(ifname)
        source = info["address"] if info and info["up"] else None
        return 0, fmt_ping(dev, rest[2], real_ping(source, rest[2]))
    if rest != ["-g"]:
        return 1, USAGE
    ifname = f"{state['roce']['iface_prefix']}{dev}"
    conf = read_conf()
    if option in ("-link", "-ip", "-mtu", "-net_health", "-lldp"):
        info = iface_info(ifname)
        if option == "-link":
            return 0, fmt_link(bool(info and info["up"]))
        if option == "-ip":
            if not info or not info["address"]:
                return 0, ""
            return 0, fmt_ip(info["address"], prefix_to_mask(info["prefixlen"]))
        if option == "-mtu":
            return 0, fmt_mtu(info["mtu"] if info else 0)
        if option == "-net_health":
            return 0, fmt_net_health(net_health(npu, info, conf, dev))
        roce = state["roce"]
        return 0, fmt_lldp(roce.get("switch_mac", "NA"),
                           f"400GE1/{dev // 2 + 1}/5:{dev % 2 + 1}",
                           roce.get("switch_ip", "NA"), 9216)
    if option == "-netdetect":
        return 0, fmt_netdetect(conf.get(f"netdetect_{dev}"))
    if option == "-gateway":
        return 0, fmt_gateway(conf.get(f"gateway_{dev}"), dev)
    if option == "-tls":
        return 0, fmt_tls(dev, int(npu.get("tls", 0)))
    if option == "-optical":
        return 0, fmt_optical()
    if option == "-link_stat":
        records = sorted(state.get("link_history", {}).get(str(dev), []) + st.link_events(dev),
                         key=lambda r: r["time"])
        return 0, fmt_link_stat(dev, time.time(), records,
                                st.major_version(state["driver"].get("Version", "0")) >= 25)
    return 1, f"Invalid option {option}.\n" + USAGE


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    code, text = run(args, st.load())
    sys.stdout.write(text)
    return code


if __name__ == "__main__":
    sys.exit(main())
