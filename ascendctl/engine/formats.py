"""Parsers for what the engine's node operations return (runtime_node's raw tool output).

Pure functions over text, tested on recorded output (tests/fixtures/engine/); the
preflight's engine facts can register them as they are:

- `podman version --format json` / `docker version --format '{{json .}}'`
- `<runtime> image inspect --format {{.Id}} IMAGE`
- `<runtime> load --input ARCHIVE`
- `<runtime> inspect --type container ID...` (devices of running containers)
- the CANN files read from an image (`==> path <==` blocks)
- /proc/*/fd holders of /dev/davinci* with their cgroup
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ascendctl.facts.version_files import (
    ToolkitInfo, VersionCfg, parse_toolkit_install_info, parse_version_cfg,
)

DEVICE_RE = re.compile(r"^/dev/(davinci\d+|davinci_manager|devmm_svm|hisi_hdc)$")
UNIT_RE = re.compile(r"/([^/]+\.(?:service|scope))(?:/|$)")


@dataclass(frozen=True)
class RuntimeVersion:
    runtime: str
    client: str | None
    server: str | None          # docker: the daemon (None when it does not answer)

    @property
    def usable(self) -> bool:
        return self.client is not None and (self.runtime == "podman" or self.server is not None)


def parse_runtime_version(runtime: str, stdout: str) -> RuntimeVersion:
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

    def version(part: Any) -> str | None:
        return str(part["Version"]) if isinstance(part, dict) and part.get("Version") else None

    client = version(data.get("Client"))
    server = version(data.get("Server"))
    if runtime == "podman" and server is None:
        server = client     # rootful local podman has no separate service
    return RuntimeVersion(runtime, client, server)


def parse_image_id(rc: int, stdout: str) -> str | None:
    """The image ID (sha256:<hex>) or None when the image is not there."""
    from ascendctl.engine.identity import normalise_image_id

    if rc != 0:
        return None
    lines = [line for line in stdout.splitlines() if line.strip()]
    try:
        return normalise_image_id(lines[-1]) if lines else None
    except ValueError:
        return None


@dataclass(frozen=True)
class LoadOutput:
    loaded: tuple[str, ...]          # references or IDs the runtime reports
    config_digest: str | None        # podman: "Copying config sha256:..."


def parse_load_output(text: str) -> LoadOutput:
    loaded: list[str] = []
    digest = None
    for line in text.splitlines():
        line = line.strip()
        match = re.match(r"^Loaded image(?:\(s\))?(?: ID)?:\s*(.+)$", line)
        if match:
            loaded += [part.strip() for part in match.group(1).split(",") if part.strip()]
        match = re.match(r"^Copying config (sha256:[0-9a-f]{64})", line)
        if match:
            digest = match.group(1)
    return LoadOutput(tuple(loaded), digest)


@dataclass(frozen=True)
class ContainerInfo:
    id: str
    name: str
    image: str                        # reference it was started from
    image_id: str | None
    pid: int | None
    running: bool
    devices: tuple[str, ...]          # NPU devices (PathOnHost) given to it

    @property
    def holds_npus(self) -> bool:
        return bool(self.devices)


def parse_container_inspect(stdout: str) -> list[ContainerInfo]:
    """`inspect --type container` output (podman and docker share these keys)."""
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
class DeviceHolder:
    pid: int
    comm: str
    unit: str | None                  # the systemd unit (or scope) it runs in
    devices: tuple[str, ...]


def unit_of(cgroup: str) -> str | None:
    """The innermost .service/.scope in /proc/PID/cgroup (v1 name=systemd or v2 line)."""
    best = None
    for line in cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and (parts[1] in ("name=systemd", "")):
            found = UNIT_RE.findall(parts[2])
            if found:
                best = found[-1]
    return best


def parse_device_holders(answer: dict[str, Any]) -> list[DeviceHolder]:
    return [DeviceHolder(int(h["pid"]), str(h.get("comm", "")), unit_of(str(h.get("cgroup", ""))),
                         tuple(h.get("devices") or ())) for h in answer.get("holders") or []]


@dataclass(frozen=True)
class ImageCann:
    """The CANN toolkit inside an image, from its version files."""

    version: str | None                     # e.g. 8.5.1
    toolkit: ToolkitInfo | None             # ascend_toolkit_install.info (compatible_version)
    version_cfg: VersionCfg | None
    files: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def found(self) -> bool:
        return self.version is not None


def split_file_blocks(stdout: str) -> dict[str, str]:
    """`==> path <==` blocks (the node's read-files script, like `tail` headers)."""
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


def parse_image_cann(stdout: str) -> ImageCann:
    files = split_file_blocks(stdout)
    toolkit = cfg = None
    for path, text in files.items():
        if path.endswith("ascend_toolkit_install.info") and toolkit is None:
            toolkit = parse_toolkit_install_info(text)
        elif path.endswith("version.cfg") and cfg is None:
            cfg = parse_version_cfg(text)
    version = (toolkit.version if toolkit and toolkit.version else None) or \
        (cfg.cann_version if cfg else None)
    return ImageCann(version, toolkit, cfg, files)
