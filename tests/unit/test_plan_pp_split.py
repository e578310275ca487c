"""The pipeline split must be vLLM's get_pp_indices, layer for layer."""

from __future__ import annotations

import random

import pytest

from ascendctl.plan.pp_split import (
    PartitionError, get_pp_indices, layer_counts, partition_from_env, stage_ranges,
)


def vllm_reference(num_layers: int, pp_rank: int, pp_size: int,
                   partition: str | None) -> tuple[int, int]:
    """vLLM's get_pp_indices (vllm/distributed/utils.py), with the env read passed in.

    When vLLM itself is importable the test uses the real function instead."""
    try:
        from vllm.distributed import utils as vllm_utils  # type: ignore
    except Exception:
        vllm_utils = None
    if vllm_utils is not None:
        import os
        old = os.environ.pop("VLLM_PP_LAYER_PARTITION", None)
        try:
            if partition is not None:
                os.environ["VLLM_PP_LAYER_PARTITION"] = partition
            return tuple(vllm_utils.get_pp_indices(num_layers, pp_rank, pp_size))
        finally:
            os.environ.pop("VLLM_PP_LAYER_PARTITION", None)
            if old is not None:
                os.environ["VLLM_PP_LAYER_PARTITION"] = old
    if partition is not None:
        parts = [int(p) for p in partition.split(",")]
    else:
        base, extra = divmod(num_layers, pp_size)
        # the `extra` stages just before the last one get one more layer each
        parts = [base + (1 if pp_size - 1 - extra <= i < pp_size - 1 else 0)
                 for i in range(pp_size)]
    start = sum(parts[:pp_rank])
    return start, start + parts[pp_rank]


@pytest.mark.parametrize("pp_size", range(1, 9))
def test_split_equals_vllm_for_every_layer_count(pp_size):
    for layers in range(1, 129):
        ranges = stage_ranges(layers, pp_size)
        for rank in range(pp_size):
            assert ranges[rank] == vllm_reference(layers, rank, pp_size, None), \
                (layers, pp_size, rank)
            assert get_pp_indices(layers, rank, pp_size) == ranges[rank]
        assert ranges[0][0] == 0 and ranges[-1][1] == layers
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))


@pytest.mark.parametrize("pp_size", range(1, 9))
def test_override_equals_vllm_for_every_layer_count(pp_size):
    rng = random.Random(pp_size)
    for layers in range(1, 129):
        cuts = sorted(rng.randint(0, layers) for _ in range(pp_size - 1))
        counts = [b - a for a, b in zip([0] + cuts, cuts + [layers])]
        partition = ",".join(map(str, counts))
        ranges = stage_ranges(layers, pp_size, partition)
        assert [b - a for a, b in ranges] == counts
        for rank in range(pp_size):
            assert ranges[rank] == vllm_reference(layers, rank, pp_size, partition)


def test_known_splits_from_vllm_tests_and_docs():
    # vLLM tests/distributed/test_pipeline_partition.py and the 61-layer docs example
    assert stage_ranges(3, 2) == [(0, 2), (2, 3)]
    assert stage_ranges(4, 3) == [(0, 1), (1, 3), (3, 4)]
    assert stage_ranges(5, 3) == [(0, 2), (2, 4), (4, 5)]
    assert layer_counts(61, 2) == [31, 30]
    assert layer_counts(61, 4) == [15, 15, 16, 15]
    assert stage_ranges(22, 4, "5,6,5,6") == [(0, 5), (5, 11), (11, 16), (16, 22)]
    assert layer_counts(60, 2) == [30, 30]


@pytest.mark.parametrize("value, layers, pp", [
    ("5,5,5,5,", 20, 4),   # trailing comma
    ("5,5,5,a", 20, 4),    # not a number
    ("5,5,5", 20, 4),      # wrong number of stages
    ("5,5,5,5", 21, 4),    # wrong total
    ("", 20, 4),           # set but empty: vLLM fails too
    ("12,-2,10", 20, 3),   # negative
])
def test_bad_override_is_refused(value, layers, pp):
    with pytest.raises(PartitionError):
        stage_ranges(layers, pp, value)


def test_override_is_read_from_the_engine_environment():
    assert partition_from_env({"VLLM_PP_LAYER_PARTITION": "31,29"}) == "31,29"
    assert partition_from_env({}) is None
    with pytest.raises(PartitionError):
        get_pp_indices(10, 2, 2)
