"""`NodeFacts`: everything known about one host after one gather round trip."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, TypeVar

from ascendctl.facts import hccn as hccn_parsers
from ascendctl.facts.chip import ChipIdentity, classify_chip
from ascendctl.facts.npu_smi import NpuSmiInfo, parse_npu_smi_info
from ascendctl.facts.npu_smi_detail import (
    BoardInfo,
    ChipMapping,
    ChipUsage,
    HealthInfo,
    MemoryInfo,
    NpuList,
    NpuTopology,
    parse_board,
    parse_health,
    parse_list,
    parse_mapping,
    parse_memory,
    parse_topo,
    parse_usages,
)
from ascendctl.facts.pci import PciInventory, parse_lspci_vvv
from ascendctl.facts.system import (
    ClockSample,
    DiskSpace,
    HostnameFacts,
    Interface,
    LinuxPing,
    ListenSocket,
    NumaTopology,
    OsRelease,
    PortProbe,
    PythonEnv,
    parse_df,
    parse_epoch,
    parse_hostname,
    parse_ip_json,
    parse_linux_ping,
    parse_lscpu_json,
    parse_nic_speeds,
    parse_numa_sysfs,
    parse_os_release,
    parse_port_probes,
    parse_python_packages,
    parse_ss_listen,
)
from ascendctl.facts.version_files import (
    DriverVersionInfo,
    FirmwareVersionInfo,
    ToolkitInfo,
    VersionCfg,
    parse_driver_version_info,
    parse_firmware_version_info,
    parse_install_status,
    parse_toolkit_install_info,
    parse_version_cfg,
)

if TYPE_CHECKING:
    from ascendctl.facts.gather import Section

T = TypeVar("T")


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


@dataclass(frozen=True)
class NodeFacts:
    host: str
    npu_smi: NpuSmiInfo | None = None
    chip: ChipIdentity | None = None
    board: BoardInfo | None = None
    chip_board: BoardInfo | None = None
    health: tuple[tuple[int, int, HealthInfo], ...] = ()        # (npu, chip, health)
    usages: tuple[tuple[int, ChipUsage], ...] = ()
    memory: tuple[tuple[int, MemoryInfo], ...] = ()
    topology: NpuTopology | None = None
    mapping: tuple[ChipMapping, ...] = ()
    npu_list: NpuList | None = None
    roce: tuple[RocePort, ...] = ()
    pings: tuple[Ping, ...] = ()
    path_mtu: tuple[PathMtuProbe, ...] = ()
    hccn_conf: hccn_parsers.HccnConf | None = None
    driver: DriverVersionInfo | None = None
    firmware: FirmwareVersionInfo | None = None
    toolkit: ToolkitInfo | None = None
    toolkit_cfg: VersionCfg | None = None
    driver_install_status: str | None = None
    interfaces: tuple[Interface, ...] = ()
    pci: PciInventory | None = None
    numa: NumaTopology | None = None
    disk: DiskSpace | None = None
    listening: tuple[ListenSocket, ...] = ()
    probes: tuple[PortProbe, ...] = ()
    clock: ClockSample | None = None
    python: PythonEnv | None = None
    os: OsRelease | None = None
    hostname: HostnameFacts | None = None
    problems: tuple[tuple[str, str], ...] = ()      # (section, what went wrong)
    missing: tuple[str, ...] = field(default=())    # sections whose command is not installed

    def to_dict(self) -> dict:
        """JSON-ready form (frozensets as sorted lists, enums as values, computed fields kept
        out); for `ascendctl facts --json`."""
        return _jsonable(self)

    def port(self, device: int) -> RocePort | None:
        for p in self.roce:
            if p.device == device:
                return p
        return None

    def interface(self, name: str) -> Interface | None:
        for i in self.interfaces:
            if i.name == name:
                return i
        return None

    def interface_with(self, address: str) -> Interface | None:
        for i in self.interfaces:
            if i.has_address(address):
                return i
        return None

    def health_of(self, npu: int, chip: int = 0) -> HealthInfo | None:
        for n, c, h in self.health:
            if n == npu and c == chip:
                return h
        return None

    def problem(self, section_prefix: str) -> str | None:
        for name, what in self.problems:
            if name == section_prefix or name.startswith(section_prefix + ":"):
                return f"{name}: {what}"
        return None


def _jsonable(value):
    import dataclasses
    from enum import Enum

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (frozenset, set)):
        return sorted(_jsonable(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


_NOT_FOUND_RC = (126, 127)


def build_node_facts(sections: dict[str, "Section"], *, host: str = "", sent_at: float | None = None,
                     received_at: float | None = None) -> NodeFacts:
    problems: list[tuple[str, str]] = []
    missing: list[str] = []

    def parsed(name: str, parser: Callable[[str], T], *, use_text: bool = False,
               need_rc0: bool = True) -> T | None:
        sec = sections.get(name)
        if sec is None:
            return None
        if sec.rc in _NOT_FOUND_RC:
            missing.append(name)
            problems.append((name, f"command not found (rc={sec.rc}): {sec.stderr.strip()[:200]}"))
            return None
        body = sec.text if use_text else sec.stdout
        if need_rc0 and sec.rc != 0 and not body.strip():
            problems.append((name, f"rc={sec.rc}: {(sec.stderr or sec.stdout).strip()[:200]}"))
            return None
        try:
            return parser(body)
        except Exception as err:  # a parser rejecting unexpected output is a fact, not a crash
            problems.append((name, f"unparseable output: {err}"))
            return None

    npu_smi = parsed("npu_smi_info", parse_npu_smi_info, use_text=True, need_rc0=False)
    board = parsed("npu_smi_board:0", parse_board, use_text=True)
    chip_board = parsed("npu_smi_board_chip:0:0", parse_board, use_text=True)
    pci = parsed("lspci", parse_lspci_vvv)

    health = []
    usages = []
    memory = []
    for name in sorted(sections):
        parts = name.split(":")
        if parts[0] == "npu_smi_health" and len(parts) == 3:
            h = parsed(name, parse_health, use_text=True, need_rc0=False)
            if h is not None:
                health.append((int(parts[1]), int(parts[2]), h))
        elif parts[0] == "npu_smi_usages" and len(parts) == 2:
            for u in parsed(name, parse_usages, use_text=True) or ():
                usages.append((int(parts[1]), u))
        elif parts[0] == "npu_smi_memory" and len(parts) == 2:
            m = parsed(name, parse_memory, use_text=True)
            if m is not None:
                memory.append((int(parts[1]), m))

    roce = _roce_ports(sections, parsed, problems)
    pings, path_mtu = _pings(sections, parsed)

    clock = None
    start = parsed("clock_start", parse_epoch)
    end = parsed("clock_end", parse_epoch)
    if start is not None and end is not None:
        clock = ClockSample(start, end, sent_at, received_at)

    disk = None
    df_sec = sections.get("df")
    if df_sec is not None:
        lines = df_sec.stdout.splitlines()
        path = lines[0][5:] if lines and lines[0].startswith("path=") else ""
        disk = parsed("df", lambda t: parse_df("\n".join(l for l in t.splitlines()
                                                          if not l.startswith("path=")), path))

    numa = parsed("numa_sysfs", parse_numa_sysfs) if (sections.get("numa_sysfs") and
                                                       sections["numa_sysfs"].stdout.strip()) else None
    if numa is None:
        numa = parsed("lscpu", parse_lscpu_json)

    interfaces = parsed("ip_addr", parse_ip_json) or ()
    speeds = parsed("nic_speed", parse_nic_speeds) or {}
    if speeds:
        from dataclasses import replace
        interfaces = tuple(replace(i, speed_mbps=speeds.get(i.name)) for i in interfaces)

    uname = sections.get("uname")
    kernel_arch = uname.stdout.split() if uname and uname.rc == 0 else []
    os_release = parsed("os_release", lambda t: parse_os_release(
        t, kernel=kernel_arch[1] if len(kernel_arch) > 1 else None,
        arch=kernel_arch[2] if len(kernel_arch) > 2 else None))

    hostname = None
    if "hostname" in sections:
        hostname = parse_hostname(sections["hostname"].stdout,
                                  sections["getent"].stdout if "getent" in sections else "")

    return NodeFacts(
        host=host,
        npu_smi=npu_smi,
        chip=classify_chip(npu_smi, board=board, chip_board=chip_board, pci=pci) if npu_smi else None,
        board=board,
        chip_board=chip_board,
        health=tuple(health),
        usages=tuple(usages),
        memory=tuple(memory),
        topology=parsed("npu_smi_topo", parse_topo, use_text=True),
        mapping=parsed("npu_smi_m", parse_mapping, use_text=True) or (),
        npu_list=parsed("npu_smi_l", parse_list, use_text=True),
        roce=roce,
        pings=pings,
        path_mtu=path_mtu,
        hccn_conf=parsed("hccn_conf", hccn_parsers.parse_hccn_conf),
        driver=parsed("version:driver", parse_driver_version_info),
        firmware=parsed("version:firmware", parse_firmware_version_info),
        toolkit=parsed("version:toolkit", parse_toolkit_install_info),
        toolkit_cfg=parsed("version:cfg", parse_version_cfg),
        driver_install_status=parsed("install_info", parse_install_status),
        interfaces=interfaces,
        pci=pci,
        numa=numa,
        disk=disk,
        listening=parsed("ss", parse_ss_listen) or (),
        probes=parsed("probes", parse_port_probes) or (),
        clock=clock,
        python=parsed("python", parse_python_packages),
        os=os_release,
        hostname=hostname,
        problems=tuple(problems),
        missing=tuple(missing),
    )


def _roce_ports(sections, parsed, problems) -> tuple[RocePort, ...]:
    devices = sorted({int(n.split(":")[2]) for n in sections
                      if n.startswith("hccn:") and n.count(":") == 2})
    ports = []
    for dev in devices:
        errors: list[str] = []

        def get(what: str, parser):
            name = f"hccn:{what}:{dev}"
            sec = sections.get(name)
            if sec is None:
                return None
            value = parsed(name, parser, use_text=False, need_rc0=False)
            if value is None and sec.rc != 0:
                errors.append(f"-{what}: rc={sec.rc} {sec.text.strip()[:160]}")
            return value

        address = get("ip", hccn_parsers.parse_ip)
        gateway = get("gateway", hccn_parsers.parse_gateway)
        tls = get("tls", hccn_parsers.parse_tls)
        ports.append(RocePort(
            device=dev,
            link=get("link", hccn_parsers.parse_link),
            ip=address.ip if address else None,
            netmask=address.netmask if address else None,
            mtu=get("mtu", hccn_parsers.parse_mtu),
            net_health=get("net_health", hccn_parsers.parse_net_health),
            netdetect=get("netdetect", hccn_parsers.parse_netdetect),
            gateway=gateway.address if gateway else None,
            tls_enabled=tls.enabled if tls else None,
            lldp_ifname=get("lldp", hccn_parsers.parse_lldp_ifname),
            errors=tuple(errors),
        ))
    return tuple(ports)


def _pings(sections, parsed) -> tuple[tuple[Ping, ...], tuple[PathMtuProbe, ...]]:
    pings: list[Ping] = []
    probes: list[PathMtuProbe] = []
    for name, sec in sorted(sections.items()):
        kind, _, rest = name.partition(":")
        if kind not in ("ping", "dfping"):
            continue
        dev_text, _, target = rest.partition(":")
        dev = int(dev_text)
        if kind == "ping":
            result = hccn_parsers.parse_ping(sec.text)
            if result is None:
                detail = "timed out" if sec.rc == 124 else (sec.text.strip()[:160] or f"rc={sec.rc}")
                pings.append(Ping(dev, target, False, None, detail))
            else:
                detail = (f"{result.received}/{result.transmitted} received" if result.transmitted is not None
                          else f"{result.timeouts} timeouts")
                pings.append(Ping(dev, target, result.ok and sec.rc == 0, result.loss_pct, detail))
        else:
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
    return tuple(pings), tuple(probes)
