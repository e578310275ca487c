"""What the gather script knows about the host it runs on (every value gets quoted)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

DEFAULT_ASCEND_ROOT = "/usr/local/Ascend"

# Shell words for the two Ascend tools in a fact's command: the gather script finds them
# once (PATH, then the driver's default places) and sets these variables.
NPU_SMI_TOOL = '"$NPUSMI"'
HCCN_TOOL = '"$HCCN"'


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
    # the serving engine (engine.kind container): its runtime and the image references
    # (the release's image ID from the archive, then engine.image) the node may hold
    engine_runtime: str | None = None           # podman | docker; None: no container facts
    engine_runtime_path: str | None = None      # default /usr/bin/<runtime>
    engine_images: tuple[str, ...] = ()

    @property
    def roce_ports(self) -> tuple[int, ...]:
        return tuple(range(self.npu_count * self.chips_per_npu))

    @property
    def root(self) -> str:
        """The Ascend install root without a trailing slash ('/' stays '/')."""
        return self.ascend_root.rstrip("/") or "/"
