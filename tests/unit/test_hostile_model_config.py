"""The model's config.json as the planner reads it (issue 19): through `ascendctl plan -i`,
a FIFO, a device, a directory, a giant, deep JSON, numbers beyond reason and values of
the wrong shape are refused with exit 2 and one line naming the file, quickly. A FIFO
where model.config or <model.source>/config.json should be is refused, never silently
replaced by model.builtin_config."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import pytest

from ascendctl.errors import InputError
from ascendctl.plan.builtin import BUILTIN_CONFIGS
from ascendctl.plan.modelcfg import MAX_LAYERS, load_model_config, parse_model_config
from tests.unit.hostile_files import (
    Cost, cli, deep_json, fifo, good_inventory, hang_guard, measure_startup, refused, sparse,
)

MOE = "qwen3-235b-a22b"


@pytest.fixture(scope="module")
def startup(tmp_path_factory) -> Cost:
    return measure_startup(tmp_path_factory.mktemp("startup"))


def config_with(**changes) -> dict:
    config = copy.deepcopy(BUILTIN_CONFIGS[MOE])
    config.update(changes)
    return config


def write(tmp_path: Path, content: object) -> Path:
    path = tmp_path / "config.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def plan_with_config(tmp_path: Path, config: Path, *, builtin: bool = True,
                     process: bool = False):
    """`ascendctl plan` on an inventory whose model.config is CONFIG (and which has a
    builtin to fall back on, which must not be used)."""
    def edit(_data, variables):
        variables["model"]["config"] = str(config)
        if builtin:
            variables["model"]["builtin_config"] = MOE

    return cli(tmp_path, "plan", "-i", good_inventory(tmp_path, edit), process=process)


CASES = {
    "a FIFO": (lambda tmp: fifo(tmp / "config.json"), None, "a FIFO, not a regular file"),
    "a device": (lambda tmp: Path("/dev/zero"), None, "a device, not a regular file"),
    "a directory": (lambda tmp: tmp, None, "a directory, not a regular file"),
    "too large": (lambda tmp: sparse(tmp / "config.json", 5 << 20), None,
                  "too large for a model config"),
    "nested deep": (lambda tmp: write(tmp, deep_json(100_000)), None,
                    "nested 100001 levels deep"),
    "a number of 5000 digits": (lambda tmp: write(tmp, '{"vocab_size": ' + "9" * 5000 + "}"),
                                None, "not valid"),
    "a list": (lambda tmp: write(tmp, [1, 2]), None, "must be a JSON object"),
    "text_config a string": (lambda tmp: write(tmp, {"text_config": "x" * 10_000}),
                             "text_config", "must be an object"),
    "a trillion layers": (lambda tmp: write(tmp, config_with(num_hidden_layers=10 ** 12)),
                          "num_hidden_layers", f"implausibly large (limit {MAX_LAYERS})"),
    "no KV heads": (lambda tmp: write(tmp, config_with(num_key_value_heads=0)),
                    "num_key_value_heads", "must be a positive integer"),
    "a size as text": (lambda tmp: write(tmp, config_with(hidden_size="4096" * 1000)),
                       "hidden_size", "must be a positive integer (got '40964096"),
    "dense layers as text": (lambda tmp: write(tmp, config_with(mlp_only_layers="0,1")),
                             "mlp_only_layers", "must be a list of layer numbers"),
    "layer types nested": (lambda tmp: write(tmp, config_with(layer_types=[[1]] * 94)),
                           "layer_types", "unknown layer type '[1]'"),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_hostile_model_config_is_refused(tmp_path, startup, case):
    make, field, phrase = CASES[case]
    path = make(tmp_path)
    prefix = f"error: {path}: " + (f"{field}: " if field else "")
    line = refused(plan_with_config(tmp_path, path), startup, prefix=prefix, phrase=phrase)
    assert "x" * 100 not in line and "4096" * 30 not in line      # values shown bounded


def test_the_real_process_refuses_a_deep_config(tmp_path):
    """The same through `python -m ascendctl`: the exit code through the interpreter."""
    path = write(tmp_path, deep_json(100_000))
    refused(plan_with_config(tmp_path, path, process=True), None, prefix=f"error: {path}: ",
            phrase="nested 100001 levels deep")


def test_a_fifo_config_json_in_the_model_source_is_refused(tmp_path, startup):
    model = tmp_path / "model"
    model.mkdir()
    fifo(model / "config.json")

    def edit(_data, variables):
        variables["model"]["source"] = str(model)
        variables["model"]["builtin_config"] = MOE

    refused(cli(tmp_path, "plan", "-i", good_inventory(tmp_path, edit)), startup,
            prefix=f"error: {model / 'config.json'}: ", phrase="a FIFO, not a regular file")


def test_model_config_option_refuses_a_device(tmp_path, startup):
    refused(cli(tmp_path, "plan", "-i", good_inventory(tmp_path), "--model-config",
                "/dev/urandom"), startup, prefix="error: /dev/urandom: ", phrase="a device")


def test_a_valid_config_is_planned(tmp_path):
    done, _ = plan_with_config(tmp_path, write(tmp_path, config_with()), builtin=False)
    assert "Traceback" not in done.stderr
    assert done.returncode in (0, 1), done.stderr          # 1: it does not fit 2 x 2 NPUs
    assert "model: " in done.stdout


def test_the_library_refuses_a_fifo_without_blocking(tmp_path):
    with hang_guard(), pytest.raises(InputError, match="a FIFO"):
        load_model_config(fifo(tmp_path / "config.json"))


# every key of a real config set to values of every wrong shape: an InputError or a
# config, never another exception (the planner divides, builds per-layer tables, ...)
WRONG = [None, True, -1, 0, 1 << 41, 10 ** 30, 1.5, "x" * 300, [], [[1]], {}, {"a": 1}]


@pytest.mark.parametrize("name", sorted(BUILTIN_CONFIGS))
def test_wrong_shapes_anywhere_are_input_errors(tmp_path, name):
    from tests.unit.test_plan_inventories import make_inventory

    from ascendctl.plan import plan_inventory

    inv = make_inventory(tmp_path)
    base = BUILTIN_CONFIGS[name]
    paths = [(key,) for key in base] + [(key, inner) for key, value in base.items()
                                        if isinstance(value, dict) for inner in value]
    paths += [(key,) for key in ("mlp_only_layers", "layer_types", "first_k_dense_replace",
                                 "kv_lora_rank", "_name_or_path", "model_type")]
    outcomes = {"config": 0, "refused": 0}
    for path in paths:
        for value in WRONG:
            config = copy.deepcopy(base)
            target = config
            for part in path[:-1]:
                target = target[part]
            target[path[-1]] = value
            try:
                plan_inventory(inv, model_config=parse_model_config(config, source="c.json"))
                outcomes["config"] += 1
            except InputError as err:
                assert "\n" not in str(err) and len(str(err)) < 400, str(err)
                outcomes["refused"] += 1
    assert outcomes["refused"] > 50 and outcomes["config"] > 50, outcomes


def test_the_largest_layer_count_allowed_is_planned_quickly(tmp_path):
    """Per-layer work is bounded by MAX_LAYERS: 10**5 layers took 179 s to plan before."""
    from tests.unit.test_plan_inventories import make_inventory

    from ascendctl.plan import plan_inventory

    config = parse_model_config(config_with(num_hidden_layers=MAX_LAYERS), source="c.json")
    started = time.process_time()
    plan_inventory(make_inventory(tmp_path), model_config=config)
    assert time.process_time() - started < 10
