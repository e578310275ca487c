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
from dataclasses import dataclass

NET_HEALTH_OK = "Success"
# `Init`: no netdetect target configured (the port was never asked to probe).
NET_HEALTH_VALUES = ("Success", "Socket fail", "Socket failed", "Receive timeout", "Unreachable",
                     "Time exceeded", "Fault", "Init", "Thread error", "Detect ip set", "Unknown")

_IPV4 = r"\d{1,3}(?:\.\d{1,3}){3}"


def _first(pattern: str, text: str, flags: int = re.IGNORECASE) -> re.Match | None:
    return re.search(pattern, text, flags | re.MULTILINE)


def parse_link(text: str) -> str | None:
    """`link status: UP` -> 'UP' (also `vnic link status:` on A3)."""
    m = _first(r"link status:\s*(UP|DOWN)\b", text)
    return m.group(1).upper() if m else None


@dataclass(frozen=True)
class PortAddress:
    ip: str | None
    netmask: str | None


def parse_ip(text: str) -> PortAddress:
    """`ipaddr:X` + `netmask:Y`; A3 `-vnic -g` prints `vnic ipaddr: X`. Empty -> (None, None)."""
    ip = _first(rf"^\s*(?:vnic\s+)?ipaddr:\s*({_IPV4})\s*$", text)
    mask = _first(rf"^\s*(?:vnic\s+)?netmask:\s*({_IPV4})\s*$", text)
    return PortAddress(ip.group(1) if ip else None, mask.group(1) if mask else None)


def parse_mtu(text: str) -> int | None:
    m = _first(r"^\s*mtu:\s*(\d+)\s*$", text)
    return int(m.group(1)) if m else None


def parse_net_health(text: str) -> str | None:
    m = _first(r"net health status:\s*(.+?)\s*$", text)
    return m.group(1) if m else None


def parse_netdetect(text: str) -> str | None:
    """Both `netdetect addr: X` and `netdetect address: X`; None when empty or not an IP."""
    m = _first(rf"netdetect (?:addr|address):\s*({_IPV4})\b", text)
    return m.group(1) if m else None


@dataclass(frozen=True)
class Gateway:
    address: str | None
    iface: str | None


def parse_gateway(text: str) -> Gateway:
    m = _first(rf"default gateway:\s*({_IPV4})?\s*,?\s*Iface:\s*(\S+)", text)
    if not m:
        m2 = _first(rf"gateway:\s*({_IPV4})", text)
        return Gateway(m2.group(1) if m2 else None, None)
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
    pre = _first(r"tls preconfigured\[(\d)\]", text)
    alarm = _first(r"tls alarm time threshold\[(\d+)\]", text)
    return TlsState(
        dev_id=int(m.group(1)) if m.group(1) else None,
        enabled=m.group(2) == "1",
        preconfigured=(pre.group(1) == "1") if pre else None,
        alarm_threshold_days=int(alarm.group(1)) if alarm else None,
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
    m = _first(r"Ifname:\s*(\S+)", text)
    return m.group(1) if m else None


def parse_lldp_max_frame(text: str) -> int | None:
    """The switch port's `Maximum Frame Size TLV` (value on the next line)."""
    m = _first(r"Maximum Frame Size TLV\s*\n\s*(\d+)", text)
    return int(m.group(1)) if m else None


def parse_speed(text: str) -> int | None:
    """`Speed: 100000 Mb/s` -> 100000; `Speed: Unknown!` -> None."""
    m = _first(r"Speed:\s*(\d+)\s*Mb/s", text)
    return int(m.group(1)) if m else None


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
