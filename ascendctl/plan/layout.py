"""A parallel layout: how many NPUs do what, and what vLLM derives from it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    mode: str            # dp | mp | ray (the launch mode)
    nodes: int
    tp: int
    pp: int = 1
    dp: int = 1
    dp_local: int = 1    # data-parallel ranks per node (mode dp)
    expert_parallel: bool = False

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def ep_size(self) -> int:
        """vLLM's expert-parallel group: every TP x DP rank of a pipeline stage."""
        return self.tp * self.dp if self.expert_parallel else 1

    @property
    def npus_per_node_used(self) -> int:
        if self.mode == "dp":
            return self.tp * self.pp * self.dp_local
        return -(-self.world // self.nodes)

    def describe(self) -> str:
        parts = []
        if self.dp > 1:
            parts.append(f"DP{self.dp}")
        parts.append(f"TP{self.tp}")
        if self.pp > 1:
            parts.append(f"PP{self.pp}")
        text = " x ".join(parts)
        if self.expert_parallel:
            text += f" + EP{self.ep_size}"
        return f"{text} ({self.mode}, {self.nodes} node{'s' if self.nodes != 1 else ''})"

    def as_dict(self) -> dict:
        return {"mode": self.mode, "nodes": self.nodes, "tensor_parallel_size": self.tp,
                "pipeline_parallel_size": self.pp, "data_parallel_size": self.dp,
                "data_parallel_size_local": self.dp_local,
                "enable_expert_parallel": self.expert_parallel,
                "expert_parallel_size": self.ep_size, "world_size": self.world,
                "description": self.describe()}
