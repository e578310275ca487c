"""One remote script per host gathers every fact in one SSH round trip.

`build_gather_script(params)` returns a bash script (run it with `bash -s` fed on stdin,
or `bash -c <script>`). It runs every fact command, in parallel where it can (at most
`max_jobs` at once), and prints each result as a delimited section:

    @@ASCENDCTL-GATHER v1 <nonce>
    @@<nonce> BEGIN <section>
    <stdout>
    @@<nonce> STDERR <section>
    <stderr>
    @@<nonce> END <section> rc=<exit code>

`parse_gather_output(text)` splits that output and calls the pure parser of each
section, returning a `NodeFacts`. Every parameter that reaches the shell is quoted
with `shlex.quote`.
"""

from __future__ import annotations

import ipaddress
import re
import secrets
import shlex
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ascendctl.facts.node import NodeFacts, build_node_facts

GATHER_FORMAT_VERSION = 1
DEFAULT_ASCEND_ROOT = "/usr/local/Ascend"

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


@dataclass(frozen=True)
class GatherParams:
    """What the gather script needs to know about this host (all values get quoted)."""

    npu_count: int = 8                          # cards, as `npu-smi info -i` counts them
    chips_per_npu: int = 1                      # 2 on A3 (dual-die)
    ascend_root: str = DEFAULT_ASCEND_ROOT
    python: str = "python3"                     # the serving venv's python, if any
    model_path: str | None = None               # free disk is measured where this lives
    listen_ports: tuple[int, ...] = ()          # ports this node must have free
    probe_host: str | None = None               # the head's address, probed from followers
    probe_ports: tuple[int, ...] = ()
    probe_timeout_s: float = 2.0
    ping_targets: Mapping[int, tuple[str, ...]] = field(default_factory=dict)  # port -> peer IPs
    ping_timeout_s: int = 8
    path_mtu: int | None = None                 # DF ping with this MTU when measurable
    extended: bool = False                      # also usages/memory/common/optical/lldp/link_stat
    max_jobs: int = 16
    pings_only: bool = False                    # only the ping/dfping sections (a second round)

    @property
    def roce_ports(self) -> tuple[int, ...]:
        return tuple(range(self.npu_count * self.chips_per_npu))


class GatherParamsError(ValueError):
    """A parameter that cannot be put in the script (bad IP, port, count)."""


def _validate(p: GatherParams) -> None:
    if not (0 < p.npu_count <= 64) or p.chips_per_npu not in (1, 2, 4):
        raise GatherParamsError(f"npu_count={p.npu_count}, chips_per_npu={p.chips_per_npu}")
    for port in (*p.listen_ports, *p.probe_ports):
        if not (0 < int(port) < 65536):
            raise GatherParamsError(f"port {port} out of range")
    for dev, ips in p.ping_targets.items():
        if int(dev) not in p.roce_ports:
            raise GatherParamsError(f"ping from device {dev}, which this host does not have")
        for ip in ips:
            ipaddress.ip_address(ip)  # raises ValueError on anything else
    if p.probe_host is not None and not re.fullmatch(r"[A-Za-z0-9.:\-_]+", p.probe_host):
        raise GatherParamsError(f"probe host {p.probe_host!r} is not an address or host name")
    if p.path_mtu is not None and not (576 <= p.path_mtu <= 9216):
        raise GatherParamsError(f"path MTU {p.path_mtu} out of range")


def plan_pings(local_ports: Sequence[int], peers: Mapping[str, Mapping[int, str]],
               all_ports: bool = False) -> dict[int, tuple[str, ...]]:
    """Targets per local RoCE port: the same-index port of every other node, or with
    `all_ports` every port of every other node. `peers` maps node -> device -> IP."""
    plan: dict[int, list[str]] = {p: [] for p in local_ports}
    for node in sorted(peers):
        for dev, ip in sorted(peers[node].items()):
            for port in local_ports:
                if all_ports or dev == port:
                    plan[port].append(ip)
    return {p: tuple(ips) for p, ips in plan.items() if ips}


def _section_name_ok(name: str) -> bool:
    return re.fullmatch(r"[A-Za-z0-9_.:\-]+", name) is not None


def build_gather_script(params: GatherParams, nonce: str | None = None) -> str:
    _validate(params)
    q = shlex.quote
    nonce = nonce or secrets.token_hex(8)
    if not re.fullmatch(r"[0-9a-f]{8,32}", nonce):
        raise GatherParamsError("nonce must be 8-32 lowercase hex digits")
    root = params.ascend_root.rstrip("/") or "/"
    jobs: list[tuple[str, str]] = []          # (section, shell command)

    def job(name: str, command: str) -> None:
        assert _section_name_ok(name), name
        jobs.append((name, command))

    npu = '"$NPUSMI"'
    hccn = '"$HCCN"'
    job("npu_smi_info", f"{npu} info")
    job("npu_smi_topo", f"{npu} info -t topo")
    job("npu_smi_m", f"{npu} info -m")
    job("npu_smi_l", f"{npu} info -l")
    job("npu_smi_board:0", f"{npu} info -t board -i 0")
    job("npu_smi_board_chip:0:0", f"{npu} info -t board -i 0 -c 0")
    for n in range(params.npu_count):
        for c in range(params.chips_per_npu):
            job(f"npu_smi_health:{n}:{c}", f"{npu} info -t health -i {n} -c {c}")
    if params.extended:
        for n in range(params.npu_count):
            if n:
                job(f"npu_smi_board:{n}", f"{npu} info -t board -i {n}")
            job(f"npu_smi_usages:{n}", f"{npu} info -t usages -i {n}")
            job(f"npu_smi_common:{n}", f"{npu} info -t common -i {n}")
            job(f"npu_smi_memory:{n}", f"{npu} info -t memory -i {n}")
    basic = ("link", "ip", "mtu", "net_health", "netdetect", "gateway")
    extra = ("optical", "link_stat", "lldp") if params.extended else ()
    for port in params.roce_ports:
        for what in basic + extra:
            job(f"hccn:{what}:{port}", f"{hccn} -i {port} -{what} -g")
        job(f"hccn:tls:{port}", f"{hccn} -i {port} -tls -g | grep -a switch")
    for port, targets in sorted(params.ping_targets.items()):
        for ip in targets:
            job(f"ping:{port}:{ip}",
                f"timeout {int(params.ping_timeout_s)} {hccn} -i {port} -ping -g address {q(ip)}")
            if params.path_mtu:
                size = params.path_mtu - 28
                # only where the device IP is a host interface (lab); on real NPUs the
                # device IP lives on the NPU and the host cannot send from it
                job(f"dfping:{port}:{ip}",
                    f"src=$({hccn} -i {port} -ip -g 2>/dev/null | sed -n 's/^ipaddr://p' | tr -d ' '); "
                    f"if [ -z \"$src\" ] || ! ip -o -4 addr show | grep -q \" inet $src/\"; then "
                    f"echo 'unsupported: device IP is not a host interface'; exit 3; fi; "
                    f"command -v ping >/dev/null || {{ echo 'unsupported: no ping'; exit 3; }}; "
                    f"ping -M do -s {size} -c 2 -i 0.2 -W 1 -I \"$src\" {q(ip)}")
    job("version:driver", f"cat {q(root + '/driver/version.info')}")
    job("version:firmware", f"cat {q(root + '/firmware/version.info')}")
    job("version:toolkit",
        f"for f in {q(root)}/ascend-toolkit/latest/*-linux/ascend_toolkit_install.info "
        f"{q(root)}/ascend-toolkit/latest/ascend_toolkit_install.info "
        f"{q(root)}/cann/latest/*-linux/ascend_toolkit_install.info; do "
        f"if [ -f \"$f\" ]; then echo \"# path: $f\"; cat \"$f\"; exit 0; fi; done; "
        f"echo 'no ascend_toolkit_install.info' >&2; exit 2")
    job("version:cfg", f"cat {q(root + '/ascend-toolkit/latest/version.cfg')}")
    job("install_info", "cat /etc/ascend_install.info")
    job("hccn_conf", "cat /etc/hccn.conf")
    job("ip_addr", "ip -j addr show")
    job("nic_speed", "for d in /sys/class/net/*; do s=$(cat \"$d/speed\" 2>/dev/null) && "
                     "echo \"${d##*/} $s\"; done; true")
    job("lspci", "lspci -D -nn -vvv")
    job("numa_sysfs", "for n in /sys/devices/system/node/node[0-9]*; do [ -r \"$n/cpulist\" ] && "
                      "echo \"${n##*/} $(cat \"$n/cpulist\")\"; done; true")
    job("lscpu", "lscpu -J")
    if params.model_path:
        job("df", f"p={q(params.model_path)}; while [ ! -e \"$p\" ] && [ \"$p\" != / ]; do "
                  f"p=$(dirname \"$p\"); done; echo \"path=$p\"; df -P -T -B1 \"$p\"")
    job("ss", "ss -Hltnp")
    if params.probe_host and params.probe_ports:
        ports = " ".join(str(int(p)) for p in params.probe_ports)
        job("probes", f"{q(params.python)} -c {q(_PY_PROBE)} {q(params.probe_host)} "
                      f"{float(params.probe_timeout_s)} {ports}")
    job("python", f"{q(params.python)} -c {q(_PY_PACKAGES)}")
    job("os_release", "cat /etc/os-release")
    job("uname", "uname -srm")
    job("hostname", "hostname")
    job("getent", "getent ahosts \"$(hostname)\"")
    if params.pings_only:
        jobs[:] = [(n, c) for n, c in jobs if n.startswith(("ping:", "dfping:"))]

    lines = [
        "#!/bin/bash",
        f"# ascendctl gather script v{GATHER_FORMAT_VERSION}: read-only; runs fact commands and prints sections",
        "set -u",
        "export LC_ALL=C",
        'export PATH="$PATH:/usr/local/sbin:/usr/local/bin:/usr/sbin:/sbin"',
        f"N={nonce}",
        f"printf '@@ASCENDCTL-GATHER v{GATHER_FORMAT_VERSION} %s\\n' \"$N\"",
        "T=$(mktemp -d \"${TMPDIR:-/tmp}/ascendctl-gather.XXXXXX\") || exit 70",
        "trap 'rm -rf \"$T\"' EXIT",
        # each job frames its own section (in parallel); the end is one `cat` in order
        "{ printf '@@%s BEGIN clock_start\\n' \"$N\"; date +%s.%N; "
        "printf '\\n@@%s STDERR clock_start\\n\\n@@%s END clock_start rc=0\\n' \"$N\" \"$N\"; } >\"$T/clock_start.sec\"",
        f"NPUSMI=$(command -v npu-smi || echo /usr/local/sbin/npu-smi)",
        f"HCCN=$(command -v hccn_tool || echo {q(root + '/driver/tools/hccn_tool')})",
        f"MAXJ={int(params.max_jobs)}",
        "run() { local n=\"$1\" f=\"$T/$2\"; shift 2; ( eval \"$1\" ) >\"$f.out\" 2>\"$f.err\" </dev/null; "
        "local rc=$?; { printf '@@%s BEGIN %s\\n' \"$N\" \"$n\"; cat \"$f.out\"; "
        "printf '\\n@@%s STDERR %s\\n' \"$N\" \"$n\"; cat \"$f.err\"; "
        "printf '\\n@@%s END %s rc=%s\\n' \"$N\" \"$n\" \"$rc\"; } >\"$f.sec\"; }",
        # a running-jobs counter: no `jobs | wc` subshell per launch (wait -n: bash >= 4.3)
        "R=0",
        "throttle() { while [ \"$R\" -ge \"$MAXJ\" ]; do if wait -n 2>/dev/null; then R=$((R-1)); "
        "else R=$(jobs -rp | wc -l); [ \"$R\" -ge \"$MAXJ\" ] && sleep 0.05; fi; done; R=$((R+1)); }",
    ]
    for name, command in jobs:
        lines.append(f"throttle; run {q(name)} {q(_file(name))} {q(command)} &")
    lines.append("wait")
    lines.append("cat " + " ".join(f'"$T/"{q(_file(n) + ".sec")}' for n in ["clock_start", *[n for n, _ in jobs]]))
    # the end time is read as late as possible: the controller pairs it with the moment
    # the output arrived
    lines.append("printf '@@%s BEGIN clock_end\\n' \"$N\"; date +%s.%N; "
                 "printf '\\n@@%s STDERR clock_end\\n\\n@@%s END clock_end rc=0\\n' \"$N\" \"$N\"")
    return "\n".join(lines) + "\n"


def _file(section: str) -> str:
    return section.replace(":", "_")


@dataclass(frozen=True)
class Section:
    name: str
    stdout: str
    stderr: str
    rc: int

    @property
    def text(self) -> str:
        """stdout and stderr together (npu-smi may print its errors on either)."""
        if self.stderr.strip():
            return self.stdout + ("\n" if self.stdout and not self.stdout.endswith("\n") else "") + self.stderr
        return self.stdout


class GatherOutputError(ValueError):
    """The output is not from the gather script (no header, truncated, mixed up)."""


_HEADER = re.compile(r"^@@ASCENDCTL-GATHER v(\d+) ([0-9a-f]+)$", re.MULTILINE)


def split_sections(text: str) -> dict[str, Section]:
    m = _HEADER.search(text)
    if not m:
        raise GatherOutputError("no gather header line: not the output of the gather script")
    if int(m.group(1)) != GATHER_FORMAT_VERSION:
        raise GatherOutputError(f"gather format v{m.group(1)}, expected v{GATHER_FORMAT_VERSION}")
    nonce = re.escape(m.group(2))
    pattern = re.compile(
        rf"^@@{nonce} BEGIN (?P<name>\S+)\n(?P<out>.*?)\n@@{nonce} STDERR (?P=name)\n(?P<err>.*?)\n"
        rf"@@{nonce} END (?P=name) rc=(?P<rc>-?\d+)$",
        re.MULTILINE | re.DOTALL)
    sections: dict[str, Section] = {}
    for sm in pattern.finditer(text, m.end()):
        sections[sm.group("name")] = Section(sm.group("name"), sm.group("out"), sm.group("err"),
                                             int(sm.group("rc")))
    if "clock_end" not in sections:
        raise GatherOutputError("gather output is truncated (no clock_end section)")
    return sections


def parse_gather_output(text: str, *, host: str = "", sent_at: float | None = None,
                        received_at: float | None = None) -> NodeFacts:
    """Turn the gather script's output into `NodeFacts`. `sent_at`/`received_at` are the
    controller's clock (epoch seconds) when the script was sent and its output received."""
    return build_node_facts(split_sections(text), host=host, sent_at=sent_at, received_at=received_at)


def facts_from_outputs(outputs: Mapping[str, "str | tuple[str, int] | tuple[str, str, int]"], *,
                       host: str = "", sent_at: float | None = None,
                       received_at: float | None = None) -> NodeFacts:
    """Build `NodeFacts` from per-section outputs (section name as in the gather script ->
    stdout, or (stdout, rc), or (stdout, stderr, rc)). For callers that ran the commands
    some other way, and for tests that feed captured tool output."""
    sections: dict[str, Section] = {}
    for name, value in outputs.items():
        if isinstance(value, str):
            sections[name] = Section(name, value, "", 0)
        elif len(value) == 2:
            sections[name] = Section(name, value[0], "", int(value[1]))
        else:
            sections[name] = Section(name, value[0], value[1], int(value[2]))
    return build_node_facts(sections, host=host, sent_at=sent_at, received_at=received_at)
