"""`hccn_tool -i N ... -g` outputs (one RoCE port per device) and `/etc/hccn.conf`.

Formats come from the 910B hccn_tool source and real captures: `link status: UP`,
`ipaddr:10.10.0.10` / `netmask:255.255.255.0` (no space; empty output when not
configured), `mtu:9000`, `net health status: Success` (older drivers: `Socket failed`),
`netdetect addr: X` (source) or `netdetect address: X` (MindIE doc),
`default gateway:X, Iface:ethN`, `dev_id:0, tls switch[0](0:disable, 1:enable), ...`
followed by certificate lines, `[devid N]` or `[device N]` link_stat prefixes.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from ascendctl.facts.fact import Derived, Fact, KeyedFact, Reading
from ascendctl.facts.params import HCCN_TOOL, GatherParams
from ascendctl.facts.system import LinuxPing, parse_linux_ping

_T = TypeVar("_T")

NET_HEALTH_OK = "Success"
# `Init`: no netdetect target configured (the port was never asked to probe).
NET_HEALTH_VALUES = ("Success", "Socket fail", "Socket failed", "Receive timeout", "Unreachable",
                     "Time exceeded", "Fault", "Init", "Thread error", "Detect ip set", "Unknown")

_IPV4 = r"\d{1,3}(?:\.\d{1,3}){3}"


def _first(pattern: str, text: str, flags: int = re.IGNORECASE) -> re.Match | None:
    return re.search(pattern, text, flags | re.MULTILINE)


def _captured(pattern: str, text: str) -> str | None:
    """What the first group of `_first(pattern, text)` captured, or None without a match."""
    m = _first(pattern, text)
    return m.group(1) if m else None


def parse_link(text: str) -> str | None:
    """`link status: UP` -> 'UP' (also `vnic link status:` on A3)."""
    status = _captured(r"link status:\s*(UP|DOWN)\b", text)
    return status.upper() if status is not None else None


@dataclass(frozen=True)
class PortAddress:
    ip: str | None
    netmask: str | None


def parse_ip(text: str) -> PortAddress:
    """`ipaddr:X` + `netmask:Y`; A3 `-vnic -g` prints `vnic ipaddr: X`. Empty -> (None, None)."""
    return PortAddress(_captured(rf"^\s*(?:vnic\s+)?ipaddr:\s*({_IPV4})\s*$", text),
                       _captured(rf"^\s*(?:vnic\s+)?netmask:\s*({_IPV4})\s*$", text))


def parse_mtu(text: str) -> int | None:
    mtu = _captured(r"^\s*mtu:\s*(\d+)\s*$", text)
    return int(mtu) if mtu is not None else None


def parse_net_health(text: str) -> str | None:
    return _captured(r"net health status:\s*(.+?)\s*$", text)


def parse_netdetect(text: str) -> str | None:
    """Both `netdetect addr: X` and `netdetect address: X`; None when empty or not an IP."""
    return _captured(rf"netdetect (?:addr|address):\s*({_IPV4})\b", text)


@dataclass(frozen=True)
class Gateway:
    address: str | None
    iface: str | None


def parse_gateway(text: str) -> Gateway:
    m = _first(rf"default gateway:\s*({_IPV4})?\s*,?\s*Iface:\s*(\S+)", text)
    if not m:
        return Gateway(_captured(rf"gateway:\s*({_IPV4})", text), None)
    return Gateway(m.group(1), m.group(2))


@dataclass(frozen=True)
class TlsState:
    dev_id: int | None
    enabled: bool | None
    preconfigured: bool | None
    alarm_threshold_days: int | None


def parse_tls(text: str) -> TlsState | None:
    """The `tls switch[N]` line; the certificate lines after it are ignored."""
    m = _first(r"(?:dev_id:\s*(\d+)\s*,\s*)?tls switch\[(\d)\]", text)
    if not m:
        return None
    pre = _captured(r"tls preconfigured\[(\d)\]", text)
    alarm = _captured(r"tls alarm time threshold\[(\d+)\]", text)
    return TlsState(
        dev_id=int(m.group(1)) if m.group(1) else None,
        enabled=m.group(2) == "1",
        preconfigured=(pre == "1") if pre is not None else None,
        alarm_threshold_days=int(alarm) if alarm is not None else None,
    )


@dataclass(frozen=True)
class OpticalInfo:
    present: str | None
    temperature_c: float | None
    values: tuple[tuple[str, str], ...]

    def get(self, key: str) -> str | None:
        for k, v in self.values:
            if k == key:
                return v
        return None


def parse_optical(text: str) -> OpticalInfo | None:
    if "optical info" not in text:
        return None
    values: list[tuple[str, str]] = []
    for line in text.splitlines():
        if ":" not in line or line.strip().startswith("optical info"):
            continue
        key, _, value = line.partition(":")
        values.append((key.strip(), value.strip()))
    d = dict(values)
    temp = re.match(r"(-?\d+(?:\.\d+)?)", d.get("temperature", ""))
    return OpticalInfo(present=d.get("present"), temperature_c=float(temp.group(1)) if temp else None,
                       values=tuple(values))


@dataclass(frozen=True)
class LinkRecord:
    when: str
    state: str                          # LINK UP | LINK DOWN


@dataclass(frozen=True)
class LinkStat:
    dev_id: int | None
    current_time: str | None
    link_up_count: int | None
    link_down_count: int | None         # newer hccn_tool only
    records: tuple[LinkRecord, ...]     # newest first, as printed


def parse_link_stat(text: str) -> LinkStat | None:
    prefix = r"\[(?:devid|device)\s+(\d+)\]"
    dev = None
    current = up = down = None
    records: list[LinkRecord] = []
    for line in text.splitlines():
        m = re.match(prefix + r"(.*)$", line.strip())
        if not m:
            continue
        dev = int(m.group(1))
        rest = m.group(2)
        kv = re.match(r"\s*(current time|link up count|link down count|link change records)\s*:\s*(.*)$", rest)
        if kv:
            key, value = kv.group(1), kv.group(2).strip()
            if key == "current time":
                current = value
            elif key == "link up count":
                up = int(value) if value.isdigit() else None
            elif key == "link down count":
                down = int(value) if value.isdigit() else None
            continue
        rec = re.match(r"\s*(.+?)\s{2,}(LINK UP|LINK DOWN)\s*$", rest)
        if rec:
            records.append(LinkRecord(rec.group(1).strip(), rec.group(2)))
    if dev is None:
        return None
    return LinkStat(dev, current, up, down, tuple(records))


@dataclass(frozen=True)
class PingResult:
    """`hccn_tool -i N -ping -g address X` (old `recv seq=0,time=..ms` or new source form)."""

    device: int | None
    target: str | None
    transmitted: int | None
    received: int | None
    loss_pct: float | None
    rtts_ms: tuple[float, ...]
    timeouts: int

    @property
    def ok(self) -> bool:
        return bool(self.received) and self.received == self.transmitted


def parse_ping(text: str) -> PingResult | None:
    head = _first(rf"device\s+(\d+)\s+PING\s+({_IPV4})", text)
    stats = _first(r"(\d+)\s+packets transmitted,\s*(\d+)\s+received,\s*([\d.]+)%\s*packets?\s+loss", text)
    rtts: list[float] = []
    for m in re.finditer(r"recv seq\s*=?\s*\d+\s*,\s*time\s*=?\s*([\d.]+)\s*(ms|us)", text):
        value = float(m.group(1))
        rtts.append(value / 1000.0 if m.group(2) == "us" else value)
    timeouts = len(re.findall(r"recv time out", text, re.IGNORECASE))
    if not head and not stats:
        return None
    return PingResult(
        device=int(head.group(1)) if head else None,
        target=head.group(2) if head else None,
        transmitted=int(stats.group(1)) if stats else None,
        received=int(stats.group(2)) if stats else None,
        loss_pct=float(stats.group(3)) if stats else None,
        rtts_ms=tuple(rtts),
        timeouts=timeouts,
    )


def parse_lldp_ifname(text: str) -> str | None:
    """The switch port this NPU port is cabled to (`Port ID TLV` / `Ifname: 400GE1/1/20:2`)."""
    return _captured(r"Ifname:\s*(\S+)", text)


# --- /etc/hccn.conf ---------------------------------------------------------------------

@dataclass(frozen=True)
class HccnConf:
    """`<key>_<phy_id>=<value>` lines, grouped by device."""

    entries: tuple[tuple[int, str, str], ...]   # (device, key, value)

    def get(self, device: int, key: str) -> str | None:
        for dev, k, v in self.entries:
            if dev == device and k == key:
                return v
        return None

    def devices(self) -> tuple[int, ...]:
        return tuple(sorted({d for d, _, _ in self.entries}))

    def addresses(self) -> dict[int, str]:
        return {d: v for d, k, v in self.entries if k == "address"}


def parse_hccn_conf(text: str) -> HccnConf:
    entries: list[tuple[int, str, str]] = []
    for line in text.splitlines():
        m = re.match(r"^\s*([A-Za-z][A-Za-z0-9_]*?)_(\d+)\s*=\s*(.*?)\s*$", line)
        if m:
            entries.append((int(m.group(2)), m.group(1), m.group(3)))
    return HccnConf(tuple(entries))


HCCN_CONF = Fact("hccn_conf", command="cat /etc/hccn.conf", parse=parse_hccn_conf)


# --- one RoCE port per device: `hccn_tool -i <device> -<option> -g` ----------------------

def _ports(params: GatherParams) -> tuple[int, ...]:
    return params.roce_ports


def _extended_ports(params: GatherParams) -> tuple[int, ...]:
    return params.roce_ports if params.extended else ()


def _port_fact(option: str, parse: Callable[[str], _T], *,
               keys: Callable[[GatherParams], tuple[int, ...]] = _ports,
               command: Callable[[int, GatherParams], str] | None = None) -> KeyedFact[int, _T]:
    """Fact `hccn_<option>`: `hccn_tool -i <port> -<option> -g` on each port. Not listed
    on its own (RocePort gathers the options) and not failing the gather: a port's exit
    status goes into its RocePort's errors."""
    return KeyedFact(f"hccn_{option}", section=f"hccn:{option}", keys=keys,
                     command=command or (lambda port, params: f"{HCCN_TOOL} -i {port} -{option} -g"),
                     parse=parse, check_rc=False, listed=False)


HCCN_LINK = _port_fact("link", parse_link)
HCCN_IP = _port_fact("ip", parse_ip)
HCCN_MTU = _port_fact("mtu", parse_mtu)
HCCN_NET_HEALTH = _port_fact("net_health", parse_net_health)
HCCN_NETDETECT = _port_fact("netdetect", parse_netdetect)
HCCN_GATEWAY = _port_fact("gateway", parse_gateway)
# only the switch line: the certificate lines after it can be long
HCCN_TLS = _port_fact("tls", parse_tls,
                      command=lambda port, params: f"{HCCN_TOOL} -i {port} -tls -g | grep -a switch")
HCCN_OPTICAL = _port_fact("optical", parse_optical, keys=_extended_ports)
HCCN_LINK_STAT = _port_fact("link_stat", parse_link_stat, keys=_extended_ports)
HCCN_LLDP = _port_fact("lldp", parse_lldp_ifname, keys=_extended_ports)

@dataclass(frozen=True)
class RocePort:
    """One NPU RoCE port as `hccn_tool -i <device>` reports it."""

    device: int
    link: str | None = None                 # UP | DOWN
    ip: str | None = None
    netmask: str | None = None
    mtu: int | None = None
    net_health: str | None = None
    netdetect: str | None = None
    gateway: str | None = None
    tls_enabled: bool | None = None
    lldp_ifname: str | None = None
    errors: tuple[str, ...] = ()            # hccn_tool failures for this port


def _roce(r: Reading) -> tuple[RocePort, ...]:
    read: dict[str, KeyedFact[int, Any]] = {
        "ip": HCCN_IP, "gateway": HCCN_GATEWAY, "tls": HCCN_TLS, "link": HCCN_LINK, "mtu": HCCN_MTU,
        "net_health": HCCN_NET_HEALTH, "netdetect": HCCN_NETDETECT, "lldp": HCCN_LLDP}
    outputs = {option: {k: (v, sec) for k, v, sec in r.each(f)} for option, f in read.items()}
    devices = sorted({k for f in (*read.values(), HCCN_OPTICAL, HCCN_LINK_STAT) for k, _ in r.sections(f)})
    ports = []
    for dev in devices:
        errors: list[str] = []

        def get(option: str):
            entry = outputs[option].get(dev)  # noqa: B023 (called in this iteration)
            if entry is None:
                return None
            value, sec = entry
            if value is None and sec.rc != 0:
                errors.append(f"-{option}: rc={sec.rc} {sec.text.strip()[:160]}")  # noqa: B023
            return value

        address, gateway, tls = get("ip"), get("gateway"), get("tls")
        ports.append(RocePort(
            device=dev, link=get("link"), ip=address.ip if address else None,
            netmask=address.netmask if address else None, mtu=get("mtu"), net_health=get("net_health"),
            netdetect=get("netdetect"), gateway=gateway.address if gateway else None,
            tls_enabled=tls.enabled if tls else None, lldp_ifname=get("lldp"), errors=tuple(errors)))
    return tuple(ports)


ROCE = Derived("roce", _roce)


# --- pings between device IPs ------------------------------------------------------------

def _targets(params: GatherParams) -> list[tuple[int, str]]:
    return [(port, ip) for port, ips in sorted(params.ping_targets.items()) for ip in ips]


HCCN_PING = KeyedFact(
    "hccn_ping", section="ping", arity=2, keys=_targets,
    command=lambda key, p: f"timeout {int(p.ping_timeout_s)} {HCCN_TOOL} -i {key[0]} -ping -g address "
                           f"{shlex.quote(key[1])}",
    parse=parse_ping, reads_stderr=True, check_rc=False, listed=False, ping_round=True)


def _dfping_command(key: tuple[int, str], p: GatherParams) -> str:
    port, ip = key
    size = (p.path_mtu or 0) - 28
    # only where the device IP is a host interface (lab); on real NPUs the device IP lives
    # on the NPU and the host cannot send from it
    return (f"src=$({HCCN_TOOL} -i {port} -ip -g 2>/dev/null | sed -n 's/^ipaddr://p' | tr -d ' '); "
            f"if [ -z \"$src\" ] || ! ip -o -4 addr show | grep -q \" inet $src/\"; then "
            f"echo 'unsupported: device IP is not a host interface'; exit 3; fi; "
            f"command -v ping >/dev/null || {{ echo 'unsupported: no ping'; exit 3; }}; "
            f"ping -M do -s {size} -c 2 -i 0.2 -W 1 -I \"$src\" {shlex.quote(ip)}")


DFPING = KeyedFact(
    "dfping", arity=2, keys=lambda p: _targets(p) if p.path_mtu else [], command=_dfping_command,
    parse=parse_linux_ping, reads_stderr=True, check_rc=False, listed=False, ping_round=True)


@dataclass(frozen=True)
class Ping:
    device: int
    target: str
    ok: bool
    loss_pct: float | None
    detail: str


@dataclass(frozen=True)
class PathMtuProbe:
    device: int
    target: str
    measurable: bool
    ok: bool
    detail: str


def _pings(r: Reading) -> tuple[Ping, ...]:
    pings = []
    for (dev, target), sec in r.sections(HCCN_PING):
        result = parse_ping(sec.text)
        if result is None:
            detail = "timed out" if sec.rc == 124 else (sec.text.strip()[:160] or f"rc={sec.rc}")
            pings.append(Ping(dev, target, False, None, detail))
        else:
            detail = (f"{result.received}/{result.transmitted} received" if result.transmitted is not None
                      else f"{result.timeouts} timeouts")
            pings.append(Ping(dev, target, result.ok and sec.rc == 0, result.loss_pct, detail))
    return tuple(pings)


def _path_mtu(r: Reading) -> tuple[PathMtuProbe, ...]:
    probes = []
    for (dev, target), sec in r.sections(DFPING):
        if sec.rc == 3 and "unsupported" in sec.stdout:
            probes.append(PathMtuProbe(dev, target, False, False, sec.stdout.strip()))
            continue
        lp: LinuxPing | None = parse_linux_ping(sec.text)
        if lp is None:
            probes.append(PathMtuProbe(dev, target, True, False, sec.text.strip()[:160] or f"rc={sec.rc}"))
        else:
            detail = f"{lp.received}/{lp.transmitted} large DF packets answered"
            if lp.frag_needed_mtu:
                detail += f"; a hop has MTU {lp.frag_needed_mtu}"
            probes.append(PathMtuProbe(dev, target, True, lp.ok, detail))
    return tuple(probes)


PINGS = Derived("pings", _pings)
PATH_MTU = Derived("path_mtu", _path_mtu)
