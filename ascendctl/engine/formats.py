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

import re
from dataclasses import dataclass
from typing import Any

from ascendctl.facts.engine import (  # noqa: F401  (the parsers live with the facts)
    DEVICE_RE, UNIT_RE, ContainerInfo, DeviceHolder, ImageCann, RuntimeVersion,
    image_cann_from_files, parse_container_inspect, parse_image_cann, parse_runtime_version,
    split_file_blocks, unit_of,
)


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


def parse_device_holders(answer: dict[str, Any]) -> list[DeviceHolder]:
    return [DeviceHolder(int(h["pid"]), str(h.get("comm", "")), unit_of(str(h.get("cgroup", ""))),
                         tuple(h.get("devices") or ())) for h in answer.get("holders") or []]
