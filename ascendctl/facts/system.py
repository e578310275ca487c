"""Host facts: network interfaces, NUMA, disk, listening ports, clock, Python packages, OS."""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass, replace
from shlex import quote

from ascendctl.facts.fact import Derived, Fact, Reading
from ascendctl.facts.npu_smi_detail import parse_cpu_list
from ascendctl.facts.params import GatherParams
from ascendctl.facts.versions import Version, try_parse_version


class FactParseError(ValueError):
    """The output is not in the expected format."""


# --- ip -j link / ip -j addr ------------------------------------------------------------

@dataclass(frozen=True)
class IpAddress:
    family: str                 # inet | inet6
    address: str
    prefixlen: int

    @property
    def is_loopback(self) -> bool:
        return ipaddress.ip_address(self.address).is_loopback


@dataclass(frozen=True)
class Interface:
    name: str
    index: int | None
    mtu: int | None
    operstate: str | None       # UP | DOWN | UNKNOWN | LOWERLAYERDOWN ...
    flags: tuple[str, ...]
    link_type: str | None       # ether | loopback ...
    mac: str | None
    addresses: tuple[IpAddress, ...]
    speed_mbps: int | None = None   # /sys/class/net/<if>/speed when the driver knows it

    @property
    def is_up(self) -> bool:
        if self.operstate == "UP":
            return True
        return self.operstate in ("UNKNOWN", None) and "UP" in self.flags and "LOWER_UP" in self.flags

    @property
    def is_loopback(self) -> bool:
        return self.link_type == "loopback" or "LOOPBACK" in self.flags

    def has_address(self, address: str) -> bool:
        return any(a.address == address for a in self.addresses)


def parse_ip_json(text: str) -> tuple[Interface, ...]:
    """`ip -j link` or `ip -j addr` (addr output carries `addr_info`)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise FactParseError(f"ip -j output is not JSON: {err}") from None
    if not isinstance(data, list):
        raise FactParseError("ip -j output is not a list")
    out = []
    for item in data:
        if not isinstance(item, dict) or "ifname" not in item:
            continue
        addrs = tuple(
            IpAddress(a.get("family", ""), a["local"], int(a.get("prefixlen", 0)))
            for a in item.get("addr_info", []) if isinstance(a, dict) and "local" in a
        )
        out.append(Interface(
            name=item["ifname"], index=item.get("ifindex"), mtu=item.get("mtu"),
            operstate=item.get("operstate"), flags=tuple(item.get("flags", [])),
            link_type=item.get("link_type"), mac=item.get("address"), addresses=addrs,
        ))
    return tuple(out)


def parse_nic_speeds(text: str) -> dict[str, int]:
    """Lines `<ifname> <speed>` (from /sys/class/net/*/speed); -1 / errors dropped."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and re.fullmatch(r"\d+", parts[1]):
            out[parts[0]] = int(parts[1])
    return out


# --- NUMA -------------------------------------------------------------------------------

@dataclass(frozen=True)
class NumaTopology:
    nodes: tuple[tuple[int, frozenset[int]], ...]     # (node, cpus)
    online_cpus: frozenset[int]

    def node_of_cpu(self, cpu: int) -> int | None:
        for node, cpus in self.nodes:
            if cpu in cpus:
                return node
        return None

    def cpus_of(self, node: int) -> frozenset[int]:
        for n, cpus in self.nodes:
            if n == node:
                return cpus
        return frozenset()


def parse_numa_sysfs(text: str) -> NumaTopology:
    """Lines `node<N> <cpulist>` from /sys/devices/system/node/node*/cpulist."""
    nodes = []
    for line in text.splitlines():
        m = re.match(r"^node(\d+)\s+([\d,\-]*)\s*$", line.strip())
        if m:
            nodes.append((int(m.group(1)), parse_cpu_list(m.group(2))))
    if not nodes:
        raise FactParseError("no NUMA node lines")
    nodes.sort()
    return NumaTopology(tuple(nodes), frozenset().union(*(c for _, c in nodes)))


def parse_lscpu_json(text: str) -> NumaTopology:
    """`lscpu -J`: fields `NUMA node<N> CPU(s):` and `On-line CPU(s) list:`."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise FactParseError(f"lscpu -J output is not JSON: {err}") from None
    fields: dict[str, str] = {}

    def walk(items):
        for item in items:
            fields[item.get("field", "").rstrip(":")] = item.get("data") or ""
            walk(item.get("children", []))

    walk(data.get("lscpu", []))
    nodes = []
    for key, value in fields.items():
        m = re.match(r"^NUMA node(\d+) CPU\(s\)$", key)
        if m:
            nodes.append((int(m.group(1)), parse_cpu_list(value)))
    online = parse_cpu_list(fields.get("On-line CPU(s) list", ""))
    nodes.sort()
    return NumaTopology(tuple(nodes), online)


# --- disk -------------------------------------------------------------------------------

@dataclass(frozen=True)
class DiskSpace:
    path: str                   # the path asked about
    filesystem: str
    fs_type: str | None
    total_bytes: int
    available_bytes: int
    mount_point: str

    @property
    def is_network(self) -> bool:
        return (self.fs_type or "").lower() in NETWORK_FS_TYPES or self.filesystem.startswith("//") \
            or (":" in self.filesystem and not self.filesystem.startswith("/"))


NETWORK_FS_TYPES = {"nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "fuse.glusterfs",
                    "fuse.sshfs", "lustre", "gpfs", "beegfs", "fuse.s3fs", "fuse.juicefs",
                    "fuse.ossfs", "9p", "fuse.cephfs", "davfs", "fuse.rclone"}


def parse_df(text: str, path: str = "") -> DiskSpace:
    """`df -P -B1 [-T] PATH` (header-aware: with or without the Type column)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 2:
        raise FactParseError("df printed no filesystem line")
    header = lines[0].split()
    has_type = len(header) > 1 and header[1] == "Type"
    parts = " ".join(lines[1:]).split()   # -P keeps one line, but be lenient
    need = 7 if has_type else 6
    if len(parts) < need:
        raise FactParseError(f"df line has {len(parts)} fields, expected {need}")
    o = 1 if has_type else 0
    try:
        total, avail = int(parts[1 + o]), int(parts[3 + o])
    except ValueError:
        raise FactParseError("df sizes are not numbers (was -B1 given?)") from None
    return DiskSpace(path=path, filesystem=parts[0], fs_type=parts[1] if has_type else None,
                     total_bytes=total, available_bytes=avail, mount_point=" ".join(parts[5 + o:]))


def parse_df_output(text: str) -> DiskSpace:
    """The gather's df section: `path=<the existing ancestor of the model path>`, then df."""
    lines = text.splitlines()
    path = lines[0][5:] if lines and lines[0].startswith("path=") else ""
    return parse_df("\n".join(line for line in lines if not line.startswith("path=")), path)


# --- listening sockets / port probes ----------------------------------------------------

@dataclass(frozen=True)
class ListenSocket:
    address: str
    port: int
    process: str | None


def parse_ss_listen(text: str) -> tuple[ListenSocket, ...]:
    """`ss -Hltn` (optionally with -p): `LISTEN 0 128 0.0.0.0:22 0.0.0.0:* [users:...]`."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 5 or parts[0] not in ("LISTEN", "UNCONN"):
            continue
        local = parts[3]
        host, _, port = local.rpartition(":")
        if not port.isdigit():
            continue
        proc = None
        m = re.search(r'users:\(\("([^"]+)"', line)
        if m:
            proc = m.group(1)
        out.append(ListenSocket(host.strip("[]"), int(port), proc))
    return tuple(out)


@dataclass(frozen=True)
class PortProbe:
    host: str
    port: int
    result: str                 # open | refused | timeout | unreachable | error

    @property
    def reachable(self) -> bool:
        """The host answered (a listener, or a RST because nothing listens yet)."""
        return self.result in ("open", "refused")


def parse_port_probes(text: str) -> tuple[PortProbe, ...]:
    """Lines `<host> <port> <result>` printed by the gather script's probe helper."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1].isdigit():
            out.append(PortProbe(parts[0], int(parts[1]), parts[2]))
    return tuple(out)


# --- clock ------------------------------------------------------------------------------

@dataclass(frozen=True)
class ClockSample:
    """The node's clock read at the start and the end of the gather script, plus the
    controller's send and receive times; NTP-style offset and its uncertainty."""

    node_start: float
    node_end: float
    sent_at: float | None = None
    received_at: float | None = None

    @property
    def offset_s(self) -> float | None:
        if self.sent_at is None or self.received_at is None:
            return None
        return ((self.node_start - self.sent_at) + (self.node_end - self.received_at)) / 2

    @property
    def uncertainty_s(self) -> float | None:
        if self.sent_at is None or self.received_at is None:
            return None
        return max(0.0, ((self.received_at - self.sent_at) - (self.node_end - self.node_start)) / 2)


def parse_epoch(text: str) -> float:
    m = re.search(r"^\s*(\d{9,}(?:\.\d+)?)\s*$", text, re.MULTILINE)
    if not m:
        raise FactParseError(f"not an epoch timestamp: {text.strip()[:40]!r}")
    return float(m.group(1))


# --- Python packages --------------------------------------------------------------------

PACKAGES = ("torch", "torch_npu", "vllm", "vllm_ascend")
_ALIASES = {"torch-npu": "torch_npu", "vllm-ascend": "vllm_ascend"}


@dataclass(frozen=True)
class PythonEnv:
    executable: str | None
    python_version: str | None
    packages: tuple[tuple[str, str | None], ...]      # (canonical name, version or None)

    def version_of(self, name: str) -> str | None:
        key = _canonical(name)
        for n, v in self.packages:
            if n == key:
                return v
        return None

    def parsed(self, name: str) -> Version | None:
        return try_parse_version(self.version_of(name))


def _canonical(name: str) -> str:
    n = name.strip().lower().replace(".", "_")
    n = _ALIASES.get(n, n)
    return n.replace("-", "_")


def parse_python_packages(text: str) -> PythonEnv:
    """Lines `python=3.11.7`, `executable=/usr/bin/python3`, `pkg:<name>=<version>`
    (empty version = not installed), printed by the gather script from
    importlib.metadata (torch is never imported)."""
    kv: dict[str, str] = {}
    packages: dict[str, str | None] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key.startswith("pkg:"):
            name = _canonical(key[4:])
            if value or name not in packages:
                packages[name] = value or packages.get(name)
        else:
            kv[key] = value
    if "python" not in kv:
        raise FactParseError("no python= line")
    return PythonEnv(kv.get("executable"), kv["python"], tuple(sorted(packages.items())))


# --- OS / hostname ----------------------------------------------------------------------

@dataclass(frozen=True)
class OsRelease:
    id: str | None
    version_id: str | None
    pretty_name: str | None
    kernel: str | None
    arch: str | None


@dataclass(frozen=True)
class Uname:
    kernel: str | None
    arch: str | None


def parse_uname(text: str) -> Uname:
    """`uname -srm`: `Linux 5.10.0-216.0.0.115.oe2203sp4.aarch64 aarch64`."""
    words = text.split()
    return Uname(words[1] if len(words) > 1 else None, words[2] if len(words) > 2 else None)


def parse_os_release(text: str, kernel: str | None = None, arch: str | None = None) -> OsRelease:
    kv = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            kv[key.strip()] = value.strip().strip('"')
    return OsRelease(kv.get("ID"), kv.get("VERSION_ID"), kv.get("PRETTY_NAME"), kernel, arch)


@dataclass(frozen=True)
class HostnameFacts:
    hostname: str
    resolved: tuple[str, ...]       # addresses `getent ahosts <hostname>` returned

    @property
    def resolves(self) -> bool:
        return bool(self.resolved)

def parse_node_name(text: str) -> str:
    """`hostname`: its first line."""
    return text.strip().splitlines()[0].strip() if text.strip() else ""


def parse_getent_ahosts(text: str) -> tuple[str, ...]:
    """`getent ahosts NAME`: the addresses, first seen first (one line per socket type)."""
    addrs: list[str] = []
    for line in text.splitlines():
        parts = line.split()
        if parts:
            try:
                ipaddress.ip_address(parts[0])
            except ValueError:
                continue
            if parts[0] not in addrs:
                addrs.append(parts[0])
    return tuple(addrs)


# --- Linux ping (large-packet, don't-fragment probes) -----------------------------------

@dataclass(frozen=True)
class LinuxPing:
    transmitted: int | None
    received: int | None
    frag_needed_mtu: int | None     # `mtu=1500` / `(mtu = 1500)` when DF hit a smaller link

    @property
    def ok(self) -> bool:
        return bool(self.received) and self.received == self.transmitted


def parse_linux_ping(text: str) -> LinuxPing | None:
    """iputils `ping -M do -s SIZE -c N` summary and fragmentation errors."""
    stats = re.search(r"(\d+) packets transmitted, (\d+) (?:packets )?received", text)
    mtu = re.search(r"mtu\s*=\s*(\d+)", text)
    if not stats and not mtu:
        return None
    return LinuxPing(int(stats.group(1)) if stats else None, int(stats.group(2)) if stats else None,
                     int(mtu.group(1)) if mtu else None)


# --- the facts --------------------------------------------------------------------------

# Printed by the `python` fact's interpreter: versions from importlib.metadata (torch is
# never imported: importing it takes seconds and may touch the NPUs).
_PY_PACKAGES = r'''
import sys
print("python=%d.%d.%d" % tuple(sys.version_info[:3]))
print("executable=" + sys.executable)
try:
    from importlib import metadata
except ImportError:
    metadata = None
for name in ("torch", "torch_npu", "torch-npu", "vllm", "vllm_ascend", "vllm-ascend"):
    version = ""
    if metadata is not None:
        try:
            version = metadata.version(name)
        except Exception:
            version = ""
    print("pkg:%s=%s" % (name, version))
'''

# TCP connect to the head's launch ports: `<host> <port> open|refused|timeout|...` lines
_PY_PROBE = r'''
import errno, socket, sys
host, timeout = sys.argv[1], float(sys.argv[2])
for port in sys.argv[3:]:
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        code = s.connect_ex((host, int(port)))
    except socket.timeout:
        code = errno.ETIMEDOUT
    except OSError as err:
        code = err.errno or -1
    finally:
        s.close()
    if code == 0:
        result = "open"
    elif code == errno.ECONNREFUSED:
        result = "refused"
    elif code in (errno.ETIMEDOUT, errno.EAGAIN, errno.EINPROGRESS):
        result = "timeout"
    elif code in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        result = "unreachable"
    else:
        result = "error"
    print("%s %s %s" % (host, port, result))
'''

IP_ADDR = Fact("ip_addr", command="ip -j addr show", parse=parse_ip_json, listed=False)
NIC_SPEED = Fact("nic_speed", command='for d in /sys/class/net/*; do s=$(cat "$d/speed" 2>/dev/null) && '
                                      'echo "${d##*/} $s"; done; true',
                 parse=parse_nic_speeds, listed=False)


def _interfaces(r: Reading) -> tuple[Interface, ...]:
    interfaces = r[IP_ADDR] or ()
    speeds = r[NIC_SPEED] or {}
    if speeds:
        interfaces = tuple(replace(i, speed_mbps=speeds.get(i.name)) for i in interfaces)
    return interfaces


INTERFACES = Derived("interfaces", _interfaces)
NUMA_SYSFS = Fact("numa_sysfs", command='for n in /sys/devices/system/node/node[0-9]*; do [ -r "$n/cpulist" ] '
                                        '&& echo "${n##*/} $(cat "$n/cpulist")"; done; true',
                  parse=parse_numa_sysfs, none_when_blank=True, listed=False)
LSCPU = Fact("lscpu", command="lscpu -J", parse=parse_lscpu_json, listed=False)
# sysfs first; lscpu only when sysfs shows no NUMA node
NUMA = Derived("numa", lambda r: r[NUMA_SYSFS] or r[LSCPU])


def _df_command(p: GatherParams) -> str | None:
    if not p.model_path:
        return None
    # the model directory may not exist yet: measure its nearest existing ancestor
    return (f"p={quote(p.model_path)}; while [ ! -e \"$p\" ] && [ \"$p\" != / ]; do "
            f"p=$(dirname \"$p\"); done; echo \"path=$p\"; df -P -T -B1 \"$p\"")


def _probe_command(p: GatherParams) -> str | None:
    if not (p.probe_host and p.probe_ports):
        return None
    ports = " ".join(str(int(port)) for port in p.probe_ports)
    return f"{quote(p.python)} -c {quote(_PY_PROBE)} {quote(p.probe_host)} {float(p.probe_timeout_s)} {ports}"


DISK = Fact("disk", section="df", command=_df_command, parse=parse_df_output)
LISTENING = Fact("listening", section="ss", command="ss -Hltnp", parse=parse_ss_listen, default=())
PROBES = Fact("probes", command=_probe_command, parse=parse_port_probes, default=())
PYTHON = Fact("python", command=lambda p: f"{quote(p.python)} -c {quote(_PY_PACKAGES)}",
              parse=parse_python_packages)
OS_RELEASE = Fact("os_release", command="cat /etc/os-release", parse=parse_os_release, listed=False)
UNAME = Fact("uname", command="uname -srm", parse=parse_uname, check_rc=False, listed=False)


def _os(r: Reading) -> OsRelease | None:
    release, uname = r[OS_RELEASE], r[UNAME]
    if release is None or uname is None:
        return release
    return replace(release, kernel=uname.kernel, arch=uname.arch)


OS = Derived("os", _os)
NODE_NAME = Fact("node_name", section="hostname", command="hostname", parse=parse_node_name,
                 check_rc=False, listed=False)
GETENT = Fact("getent", command='getent ahosts "$(hostname)"', parse=parse_getent_ahosts, check_rc=False,
              listed=False)


def _hostname(r: Reading) -> HostnameFacts | None:
    if r.section(NODE_NAME) is None:
        return None
    name, addresses = r[NODE_NAME], r[GETENT]
    return HostnameFacts(name or "", addresses or ())


HOSTNAME = Derived("hostname", _hostname)
