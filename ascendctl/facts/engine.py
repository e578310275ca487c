"""The serving engine on a node: its container runtime, the release's image and the CANN
toolkit inside it, and whatever holds the node's NPU devices (processes and containers).

Read in the preflight's one round trip per host; the commands only read (`version`,
`image inspect`, `ps`/`inspect`, a throw-away `run --rm --network=none` that prints the
toolkit's version files, /proc). Facts for a container runtime are gathered only when the
inventory's engine is a container (`GatherParams.engine_runtime`). The parsers are shared
with the deploy's node operations (ascendctl/engine/formats.py re-exports them).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from shlex import quote
from typing import Any, Optional

from ascendctl.facts.fact import Fact
from ascendctl.facts.version_files import (
    ToolkitInfo, VersionCfg, parse_toolkit_install_info, parse_version_cfg,
)

DEVICE_RE = re.compile(r"^/dev/(davinci\d+|davinci_manager|devmm_svm|hisi_hdc)$")
UNIT_RE = re.compile(r"/([^/]+\.(?:service|scope))(?:/|$)")
# Where a CANN toolkit keeps its version files inside an image (CANN <= 8.x and the
# cann-<ver> layout of newer ones).
CANN_FILES = (
    "/usr/local/Ascend/ascend-toolkit/latest/version.cfg",
    "/usr/local/Ascend/ascend-toolkit/latest/*-linux/ascend_toolkit_install.info",
    "/usr/local/Ascend/cann/latest/version.cfg",
    "/usr/local/Ascend/cann/latest/*-linux/ascend_toolkit_install.info",
)
READ_FILES_SCRIPT = ('for f in $@; do [ -r "$f" ] || continue; printf "==> %s <==\\n" "$f"; '
                     'cat "$f"; echo; done')


# -- the runtime -------------------------------------------------------------------------

@dataclass(frozen=True)
class RuntimeVersion:
    runtime: str
    client: Optional[str]
    server: Optional[str]          # docker: the daemon (None when it does not answer)

    @property
    def usable(self) -> bool:
        return self.client is not None and (self.runtime == "podman" or self.server is not None)


def parse_runtime_version(runtime: str, stdout: str) -> RuntimeVersion:
    """`podman version --format json` / `docker version --format '{{json .}}'`."""
    text = stdout.strip()
    data: Any = None
    for line in [text] + text.splitlines():
        try:
            data = json.loads(line)
            break
        except ValueError:
            continue
    if not isinstance(data, dict):
        return RuntimeVersion(runtime, None, None)

    def version(part: Any) -> Optional[str]:
        return str(part["Version"]) if isinstance(part, dict) and part.get("Version") else None

    client = version(data.get("Client"))
    server = version(data.get("Server"))
    if runtime == "podman" and server is None:
        server = client     # rootful local podman has no separate service
    return RuntimeVersion(runtime, client, server)


@dataclass(frozen=True)
class EngineRuntime:
    """The inventory's container runtime on the node."""

    runtime: str
    installed: bool
    version: Optional[RuntimeVersion] = None
    error: Optional[str] = None        # what `version` said besides its JSON (daemon down)

    @property
    def usable(self) -> bool:
        return self.installed and self.version is not None and self.version.usable


def parse_engine_runtime(text: str) -> EngineRuntime:
    """`#runtime NAME [absent]` then the version output (stdout and stderr)."""
    first, _, rest = text.partition("\n")
    head = first.split()
    if len(head) < 2 or head[0] != "#runtime":
        raise ValueError(f"expected '#runtime NAME', got {first[:60]!r}")
    runtime = head[1]
    if "absent" in head[2:]:
        return EngineRuntime(runtime, False)
    version = parse_runtime_version(runtime, rest)
    lines = [ln for ln in rest.splitlines() if ln.strip() and not ln.lstrip().startswith(("{", "}", '"'))]
    error = "; ".join(ln.strip() for ln in lines)[-300:] or None
    return EngineRuntime(runtime, True, version, error if not version.usable else None)


def _runtime_word(p) -> str:
    return quote(p.engine_runtime_path or f"/usr/bin/{p.engine_runtime}")


def _runtime_command(p) -> Optional[str]:
    if not p.engine_runtime:
        return None
    rt = _runtime_word(p)
    fmt = "json" if p.engine_runtime == "podman" else quote("{{json .}}")
    name = quote(p.engine_runtime)
    return (f"if [ -x {rt} ]; then echo '#runtime' {name}; {rt} version --format {fmt} 2>&1; "
            f"else echo '#runtime' {name} absent; fi")


ENGINE_RUNTIME = Fact("engine_runtime", command=_runtime_command, parse=parse_engine_runtime,
                      check_rc=False)


# -- the release's image -----------------------------------------------------------------

@dataclass(frozen=True)
class EngineImages:
    """The image IDs the node holds for the references asked (None: not there)."""

    images: tuple[tuple[str, Optional[str]], ...] = ()

    def id_of(self, reference: str) -> Optional[str]:
        return next((i for r, i in self.images if r == reference), None)


def normal_image_id(text: str) -> Optional[str]:
    value = text.strip().lower().removeprefix("sha256:")
    if len(value) == 64 and all(ch in "0123456789abcdef" for ch in value):
        return "sha256:" + value
    return None


def parse_engine_images(text: str) -> EngineImages:
    """One `REFERENCE<TAB>ID` line per reference (ID empty: no such image)."""
    found = []
    for line in text.splitlines():
        if not line.strip():
            continue
        ref, _, image_id = line.partition("\t")
        found.append((ref, normal_image_id(image_id) if image_id.strip() else None))
    return EngineImages(tuple(found))


def _images_command(p) -> Optional[str]:
    if not p.engine_runtime or not p.engine_images:
        return None
    rt = _runtime_word(p)
    refs = " ".join(quote(r) for r in p.engine_images)
    return (f"[ -x {rt} ] || exit 0; for ref in {refs}; do "
            f"id=$({rt} image inspect --format '{{{{.Id}}}}' \"$ref\" 2>/dev/null); "
            "printf '%s\\t%s\\n' \"$ref\" \"$id\"; done")


ENGINE_IMAGES = Fact("engine_images", command=_images_command, parse=parse_engine_images,
                     check_rc=False, none_when_blank=True)


@dataclass(frozen=True)
class ImageCann:
    """The CANN toolkit inside an image, from its version files."""

    version: Optional[str]                     # e.g. 8.5.1
    toolkit: Optional[ToolkitInfo]             # ascend_toolkit_install.info (compatible_version)
    version_cfg: Optional[VersionCfg]
    files: dict[str, str] = field(default_factory=dict, compare=False)
    image: Optional[str] = None                # the image they were read from

    @property
    def found(self) -> bool:
        return self.version is not None


def split_file_blocks(stdout: str) -> dict[str, str]:
    """`==> path <==` blocks (the read-files script, like `tail` headers)."""
    files: dict[str, str] = {}
    current = None
    lines: list[str] = []
    for line in stdout.splitlines():
        match = re.match(r"^==> (/\S+) <==$", line)
        if match:
            if current is not None:
                files[current] = "\n".join(lines).strip("\n") + "\n"
            current, lines = match.group(1), []
        elif current is not None:
            lines.append(line)
    if current is not None:
        files[current] = "\n".join(lines).strip("\n") + "\n"
    return files


def image_cann_from_files(files: dict[str, str], image: Optional[str] = None) -> ImageCann:
    toolkit = cfg = None
    for path, text in sorted(files.items()):
        if path.endswith("ascend_toolkit_install.info") and toolkit is None:
            toolkit = parse_toolkit_install_info(text)
        elif path.endswith("version.cfg") and cfg is None:
            cfg = parse_version_cfg(text)
    version = (toolkit.version if toolkit and toolkit.version else None) or \
        (cfg.cann_version if cfg else None)
    return ImageCann(version, toolkit, cfg, files, image)


def parse_image_cann(stdout: str) -> ImageCann:
    """The version files read from an image; an optional `#image REF` first line names it."""
    image = None
    first, _, rest = stdout.partition("\n")
    if first.startswith("#image "):
        image, stdout = first.split(None, 1)[1].strip(), rest
    return image_cann_from_files(split_file_blocks(stdout), image)


def _image_cann_command(p) -> Optional[str]:
    if not p.engine_runtime or not p.engine_images:
        return None
    rt = _runtime_word(p)
    refs = " ".join(quote(r) for r in p.engine_images)
    files = " ".join(quote(f) for f in CANN_FILES)
    # the first image of the list the node holds (the release's ID, then the reference)
    # --entrypoint=/bin/sh: reading files needs none of the entrypoint's environment, and
    # an entrypoint that fails (a set_env.sh it sources is missing) must not hide them
    return (f"[ -x {rt} ] || exit 0; for ref in {refs}; do "
            f"if {rt} image inspect \"$ref\" >/dev/null 2>&1; then echo \"#image $ref\"; "
            f"exec {rt} run --rm --pull=never --network=none --entrypoint=/bin/sh \"$ref\" "
            f"-c {quote(READ_FILES_SCRIPT)} sh {files}; fi; done")


ENGINE_IMAGE_CANN = Fact("engine_image_cann", command=_image_cann_command,
                         parse=parse_image_cann, check_rc=False, none_when_blank=True)


# -- what holds the NPUs -----------------------------------------------------------------

@dataclass(frozen=True)
class DeviceHolder:
    pid: int
    comm: str
    unit: Optional[str]                 # the systemd unit (or scope) it runs in
    devices: tuple[str, ...]


@dataclass(frozen=True)
class NpuHolders:
    """Processes with an NPU device open (/proc/*/fd), outside the gather's own session."""

    processes: tuple[DeviceHolder, ...] = ()


def unit_of(cgroup: str) -> Optional[str]:
    """The innermost .service/.scope in /proc/PID/cgroup (v1 name=systemd or v2 line)."""
    best = None
    for line in cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and (parts[1] in ("name=systemd", "")):
            found = UNIT_RE.findall(parts[2])
            if found:
                best = found[-1]
    return best


def parse_npu_holders(text: str) -> NpuHolders:
    """`self SID`, then per holder `holder PID SID DEVICE COMM` and its `cgroup PID LINE`s."""
    own_session = None
    devices: dict[int, set[str]] = {}
    comms: dict[int, str] = {}
    sessions: dict[int, str] = {}
    cgroups: dict[int, list[str]] = {}
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "self":
            own_session = rest.strip()
        elif kind == "holder":
            pid, sid, device, comm = (rest.split(" ", 3) + ["", "", "", ""])[:4]
            if not pid.isdigit() or not DEVICE_RE.match(device):
                raise ValueError(f"bad holder line {line[:80]!r}")
            devices.setdefault(int(pid), set()).add(device)
            comms[int(pid)] = comm.strip()
            sessions[int(pid)] = sid
        elif kind == "cgroup":
            pid, _, cgroup = rest.partition(" ")
            if pid.isdigit():
                cgroups.setdefault(int(pid), []).append(cgroup)
        elif line.strip():
            raise ValueError(f"unexpected line {line[:80]!r}")
    holders = tuple(DeviceHolder(pid, comms[pid], unit_of("\n".join(cgroups.get(pid, []))),
                                 tuple(sorted(devs)))
                    for pid, devs in sorted(devices.items())
                    if own_session is None or sessions[pid] != own_session)
    return NpuHolders(holders)


NPU_HOLDERS_SCRIPT = r"""
read -r _ _ _ _ _ sid _ < /proc/self/stat; echo "self $sid"
find /proc/[0-9]*/fd -maxdepth 1 -type l \( -lname '/dev/davinci*' -o -lname /dev/devmm_svm \
    -o -lname /dev/hisi_hdc \) -printf '%h %l\n' 2>/dev/null | sort -u |
while read -r dir dev; do
  pid=${dir#/proc/}; pid=${pid%/fd}
  stat=$(cat /proc/$pid/stat 2>/dev/null) || continue
  set -- ${stat##*) }
  printf 'holder %s %s %s %s\n' "$pid" "$4" "$dev" "$(cat /proc/$pid/comm 2>/dev/null)"
  grep -E '^[0-9]+:(name=systemd)?:' /proc/$pid/cgroup 2>/dev/null | sed "s/^/cgroup $pid /"
done
"""

NPU_HOLDERS = Fact("npu_holders", command=NPU_HOLDERS_SCRIPT.strip(), parse=parse_npu_holders)


@dataclass(frozen=True)
class ContainerInfo:
    id: str
    name: str
    image: str                          # reference it was started from
    image_id: Optional[str]
    pid: Optional[int]
    running: bool
    devices: tuple[str, ...]            # NPU devices (PathOnHost) given to it

    @property
    def holds_npus(self) -> bool:
        return bool(self.devices)


def parse_container_inspect(stdout: str) -> list[ContainerInfo]:
    """`inspect --type container` output (podman and docker share these keys); [] for
    output that is not JSON."""
    try:
        data = json.loads(stdout or "[]")
    except ValueError:
        return []
    out = []
    for item in data if isinstance(data, list) else []:
        if not isinstance(item, dict):
            continue
        host = item.get("HostConfig") or {}
        devices = tuple(sorted(
            str(d.get("PathOnHost")) for d in host.get("Devices") or []
            if isinstance(d, dict) and DEVICE_RE.match(str(d.get("PathOnHost", "")))))
        state = item.get("State") or {}
        image = item.get("ImageName") or (item.get("Config") or {}).get("Image") or ""
        raw_id = str(item.get("Image") or "")
        out.append(ContainerInfo(
            id=str(item.get("Id", "")), name=str(item.get("Name", "")).lstrip("/"),
            image=str(image),
            image_id=("sha256:" + raw_id.removeprefix("sha256:")) if raw_id else None,
            pid=int(state["Pid"]) if isinstance(state.get("Pid"), int) and state["Pid"] else None,
            running=bool(state.get("Running")), devices=devices))
    return out


@dataclass(frozen=True)
class EngineContainers:
    """The running containers of the inventory's runtime (None: runtime not installed)."""

    containers: tuple[ContainerInfo, ...] = ()

    @property
    def holding_npus(self) -> tuple[ContainerInfo, ...]:
        return tuple(c for c in self.containers if c.holds_npus)


def parse_engine_containers(text: str) -> EngineContainers:
    if not isinstance(json.loads(text), list):
        raise ValueError("inspect did not print a JSON list")
    return EngineContainers(tuple(parse_container_inspect(text)))


def _containers_command(p) -> Optional[str]:
    if not p.engine_runtime:
        return None
    rt = _runtime_word(p)
    return (f"[ -x {rt} ] || exit 0; ids=$({rt} ps --no-trunc --quiet) || exit $?; "
            f"if [ -n \"$ids\" ]; then {rt} inspect --type container $ids; else echo '[]'; fi")


ENGINE_CONTAINERS = Fact("engine_containers", command=_containers_command,
                         parse=parse_engine_containers, none_when_blank=True)
