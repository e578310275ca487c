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

The commands are those of the registered facts (`registry.all_facts()`, see fact.py):
this module only frames them. `parse_gather_output(text)` splits that output and hands
the sections to `build_node_facts`, which runs each fact's pure parser. Every parameter
that reaches the shell is quoted with `shlex.quote` (by the fact that puts it there).
"""

from __future__ import annotations

import ipaddress
import re
import secrets
import shlex
from typing import Mapping, Sequence

from ascendctl.facts.fact import Derived, Fact, Reading, Section
from ascendctl.facts.node import NodeFacts, build_node_facts
from ascendctl.facts.params import DEFAULT_ASCEND_ROOT, GatherParams
from ascendctl.facts.registry import all_facts
from ascendctl.facts.system import ClockSample, parse_epoch

__all__ = ["DEFAULT_ASCEND_ROOT", "GATHER_FORMAT_VERSION", "GatherOutputError", "GatherParams",
           "GatherParamsError", "Section", "build_gather_script", "facts_from_outputs",
           "parse_gather_output", "plan_pings", "split_sections"]

GATHER_FORMAT_VERSION = 1

# The script itself prints these two sections, first and last, around every command.
CLOCK_START = Fact("clock_start", command=None, parse=parse_epoch, listed=False)
CLOCK_END = Fact("clock_end", command=None, parse=parse_epoch, listed=False)


def _clock(r: Reading) -> ClockSample | None:
    start, end = r[CLOCK_START], r[CLOCK_END]
    if start is None or end is None:
        return None
    return ClockSample(start, end, r.sent_at, r.received_at)


CLOCK = Derived("clock", _clock)


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


def build_gather_script(params: GatherParams, nonce: str | None = None, *,
                        after_facts: str = "") -> str:
    """`after_facts`: shell run once every fact command has finished, before the sections
    are printed (its output goes to stdout outside any section)."""
    _validate(params)
    q = shlex.quote
    nonce = nonce or secrets.token_hex(8)
    if not re.fullmatch(r"[0-9a-f]{8,32}", nonce):
        raise GatherParamsError("nonce must be 8-32 lowercase hex digits")
    root = params.root
    jobs: list[tuple[str, str]] = []          # (section, shell command)
    for fact in all_facts():
        if params.pings_only and not getattr(fact, "ping_round", False):
            continue
        for name, command in fact.commands(params):
            assert _section_name_ok(name), name
            jobs.append((name, command))

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
        "NPUSMI=$(command -v npu-smi || echo /usr/local/sbin/npu-smi)",
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
    if after_facts:
        lines.append(after_facts.rstrip("\n"))
    lines.append("cat " + " ".join(f'"$T/"{q(_file(n) + ".sec")}' for n in ["clock_start", *[n for n, _ in jobs]]))
    # the end time is read as late as possible: the controller pairs it with the moment
    # the output arrived
    lines.append("printf '@@%s BEGIN clock_end\\n' \"$N\"; date +%s.%N; "
                 "printf '\\n@@%s STDERR clock_end\\n\\n@@%s END clock_end rc=0\\n' \"$N\" \"$N\"")
    return "\n".join(lines) + "\n"


def _file(section: str) -> str:
    return section.replace(":", "_")


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
