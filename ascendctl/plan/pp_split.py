"""Pipeline-parallel layer split, identical to vLLM's `get_pp_indices`.

vLLM (vllm/distributed/utils.py) gives every stage `L // pp` layers and hands the
remainder out one layer each, starting at the second-to-last stage and walking
backwards (the last stage already carries the final norm and lm_head). The env
variable `VLLM_PP_LAYER_PARTITION="a,b,..."` replaces the rule; it must name one count
per stage and sum to L. The weights code uses the same split to decide which tensors a
stage's node needs, so this module is the single source of truth for both.
"""

from __future__ import annotations

from collections.abc import Mapping

PARTITION_ENV = "VLLM_PP_LAYER_PARTITION"


class PartitionError(ValueError):
    """A `VLLM_PP_LAYER_PARTITION` value vLLM would reject (or that cannot work)."""


def parse_partition(value: str, num_layers: int, pp_size: int) -> list[int]:
    """Layer counts from a `VLLM_PP_LAYER_PARTITION` string, validated like vLLM does."""
    try:
        counts = [int(part) for part in value.split(",")]
    except ValueError:
        raise PartitionError(f"{PARTITION_ENV}={value!r} is not a comma-separated list "
                             "of integers") from None
    if len(counts) != pp_size:
        raise PartitionError(f"{PARTITION_ENV}={value!r} names {len(counts)} stages, "
                             f"but pipeline_parallel_size is {pp_size}")
    if sum(counts) != num_layers:
        raise PartitionError(f"{PARTITION_ENV}={value!r} sums to {sum(counts)} layers, "
                             f"but the model has {num_layers}")
    if any(count < 0 for count in counts):
        # vLLM does not check this; a negative count gives overlapping stages.
        raise PartitionError(f"{PARTITION_ENV}={value!r} has a negative layer count")
    return counts


def layer_counts(num_layers: int, pp_size: int, partition: str | None = None) -> list[int]:
    """Number of decoder layers on each pipeline stage."""
    if num_layers < 0 or pp_size < 1:
        raise PartitionError(f"need num_layers >= 0 and pp_size >= 1 "
                             f"(got {num_layers}, {pp_size})")
    if partition is not None:
        return parse_partition(partition, num_layers, pp_size)
    counts = [num_layers // pp_size] * pp_size
    remainder = num_layers % pp_size
    for offset in range(2, remainder + 2):
        counts[-offset] += 1
    return counts


def stage_ranges(num_layers: int, pp_size: int,
                 partition: str | None = None) -> list[tuple[int, int]]:
    """`[start, end)` of every stage: `stage_ranges(L, pp)[r] == get_pp_indices(L, r, pp)`."""
    ranges = []
    start = 0
    for count in layer_counts(num_layers, pp_size, partition):
        ranges.append((start, start + count))
        start += count
    return ranges


def get_pp_indices(num_layers: int, pp_rank: int, pp_size: int,
                   partition: str | None = None) -> tuple[int, int]:
    """Same contract as vLLM's function (the partition is passed in, not read globally)."""
    if not 0 <= pp_rank < pp_size:
        raise PartitionError(f"pp_rank {pp_rank} is outside 0..{pp_size - 1}")
    return stage_ranges(num_layers, pp_size, partition)[pp_rank]


def partition_from_env(env: Mapping[str, str]) -> str | None:
    """The override as the engine will see it (present but empty is an error in vLLM too)."""
    return env.get(PARTITION_ENV)
