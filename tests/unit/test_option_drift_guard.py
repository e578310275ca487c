"""The option-drift guard on inventories: `inventory check`, `plan` and `deploy --check`
refuse what the pinned vllm-ascend release's engine would refuse at start-up (exit 2, one
line `file:line: field: message`) and warn about what it would ignore; an inventory
without a vllm_ascend pin is not checked."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from ascendctl.drift import option_warnings
from ascendctl.drift.argv import read_options
from ascendctl.drift.guard import Argv, check_options
from ascendctl.drift.schema import load_schema
from ascendctl.errors import InputError
from ascendctl.load import load_inventory

REFERENCE = Path(__file__).parents[2] / "inventory.example.yaml"

BASE = """\
all:
  vars:
    cluster: {{name: test, chip: 910B3, npus_per_node: 2}}
    ssh: {{user: root, known_hosts: /dev/null}}
    model: {{source: /srv/models/tiny, served_name: tiny}}
    serving:
      mode: mp
      pipeline_parallel_size: 2
      max_model_len: 256
      extra_args: {extra_args}
      env: {env}
      additional_config: {config}
    versions: {versions}
  children:
    nodes:
      hosts:
        node0: {{ansible_host: 198.18.250.11, rank: 0, nic: host0}}
        node1: {{ansible_host: 198.18.250.12, rank: 1, nic: host0}}
"""
EXTRA_ARGS_LINE = 10
ENV_LINE = 11
CONFIG_LINE = 12


def inventory(tmp_path: Path, *, release: str | None = "0.23.0", extra_args: str = "[]",
              env: str = "{}", config: str = "{enable_cpu_binding: true}") -> Path:
    versions = f"{{vllm_ascend: '{release}'}}" if release else "{}"
    path = tmp_path / "inv.yaml"
    path.write_text(BASE.format(extra_args=extra_args, env=env, config=config,
                                versions=versions))
    return path


def refusal(path: Path) -> InputError:
    with pytest.raises(InputError) as caught:
        load_inventory(path, check_files=False)
    return caught.value


def release_options(release: str):
    return load_schema().options(release)


# -- reading argv as vLLM does ----------------------------------------------------------

@pytest.mark.parametrize("item,resolved", [
    ("--max-model-len", "--max-model-len"),
    ("--max_model_len=4096", "--max-model-len"),        # `_` reads as `-`
    ("--max-model-l", "--max-model-len"),               # unique prefix
    ("--no-enable-prefix-caching", "--no-enable-prefix-caching"),  # BooleanOptionalAction
    ("-tp", "-tp"),
    ("-O3", "--optimization-level"),
    ("--compilation-config.cudagraph_mode", "--compilation-config"),
])
def test_vllm_reads_these_as_its_options(item, resolved):
    [option] = read_options([item], release_options("0.23.0"))
    assert (option.resolved, option.problem) == (resolved, None)


@pytest.mark.parametrize("item,problem", [
    ("--Max-Model-Len", "unknown"),        # vLLM's names are case-sensitive
    ("--max-nu", "ambiguous"),             # --max-num-seqs, --max-num-batched-tokens, ...
    ("--seed 1024", "space"),              # one argv item: argparse takes it for a positional
    ("--no-such-option", "unknown"),
    ("-zz", "unknown"),
])
def test_vllm_refuses_these(item, problem):
    [option] = read_options([item], release_options("0.23.0"))
    assert option.resolved is None and option.problem.startswith(problem)


def test_values_and_negative_numbers_are_not_options():
    options = read_options(["model", "--seed", "-1", "--port", "8000", "x"],
                           release_options("0.23.0"))
    assert [o.resolved for o in options] == ["--seed", "--port"]


def test_additional_config_given_in_argv_is_checked():
    schema = load_schema()
    argv = ["--additional-config", '{"enable_sparse_c8": true}', "--additional-config.layer_sharding",
            "x"]
    found = check_options(schema, "0.30.0rc1", argvs=[Argv(argv, list(range(len(argv))))])
    assert [(f.fatal, f.where) for f in found] == [(True, 0), (True, 2)]


def test_fail_on_environ_validation_makes_unknown_vllm_variables_fatal():
    schema = load_schema()
    env = [("VLLM_NO_SUCH_VARIABLE", "env", None)]
    relaxed = check_options(schema, "0.23.0", env=env)
    strict = check_options(schema, "0.23.0", env=env,
                           argvs=[Argv(["--fail-on-environ-validation"], ["argv"])])
    assert [f.fatal for f in relaxed] == [False]
    assert [f.fatal for f in strict] == [True]
    assert "Unknown vLLM environment variable" in strict[0].message


def test_other_components_variables_are_not_judged():
    found = check_options(load_schema(), "0.23.0",
                          env=[("HCCL_BUFFSIZE", "e", None), ("TASK_QUEUE_ENABLE", "e", None)])
    assert found == []


def test_a_flag_new_in_a_later_vllm_names_the_release_that_has_it():
    found = check_options(load_schema(), "0.17.0rc1",
                          argvs=[Argv(["--quantization-config", "{}"], ["a", "a"])])
    assert len(found) == 1 and found[0].fatal
    assert "new in vLLM 0.22.1" in found[0].message


# -- inventories -------------------------------------------------------------------------

def test_a_removed_flag_is_refused_at_its_line(tmp_path):
    error = refusal(inventory(tmp_path, extra_args="[--swap-space, '4']"))
    assert (error.line, error.field) == (EXTRA_ARGS_LINE, "all.vars.serving.extra_args[0]")
    assert "--swap-space" in str(error) and "removed in vLLM 0.18.0" in str(error)


def test_an_unknown_key_is_refused_from_0_27_and_ignored_before(tmp_path):
    config = "{enable_sparse_c8: true}"
    error = refusal(inventory(tmp_path, release="0.30.0rc1", config=config))
    assert (error.line, error.field) == (
        CONFIG_LINE, "all.vars.serving.additional_config.enable_sparse_c8")
    assert "enable_sparse_sfa_c8" in str(error) and "v0.23.0" in str(error)
    inv = load_inventory(inventory(tmp_path, release="0.23.0", config=config),
                         check_files=False)
    [warning] = [w for w in option_warnings(inv) if "enable_sparse_c8" in w]
    assert f":{CONFIG_LINE}: all.vars.serving.additional_config.enable_sparse_c8: " in warning
    assert "ignores it silently" in warning


def test_a_removed_variable_warns_with_release_and_replacement(tmp_path):
    path = inventory(tmp_path, release="0.23.0",
                     env="{VLLM_ASCEND_ENABLE_CONTEXT_PARALLEL: '1'}")
    [warning] = [w for w in option_warnings(load_inventory(path, check_files=False))
                 if "CONTEXT_PARALLEL" in w]
    assert f":{ENV_LINE}: all.vars.serving.env.VLLM_ASCEND_ENABLE_CONTEXT_PARALLEL:" in warning
    assert "0.21.0rc1" in warning and "enable_dsa_cp" in warning


def test_without_a_vllm_ascend_pin_nothing_is_checked(tmp_path):
    path = inventory(tmp_path, release=None, extra_args="[--swap-space, '4']",
                     config="{no_such_key: 1}")
    assert option_warnings(load_inventory(path, check_files=False)) == []


def test_pins_match_releases_as_versions():
    schema = load_schema()
    assert schema.release_of("v0.23.0") == "0.23.0"
    assert schema.release_of("0.30.0rc2") == "0.30.0rc2"
    assert schema.release_of("0.31.0") is None


def test_the_reference_inventory_passes_clean():
    assert option_warnings(load_inventory(REFERENCE, check_files=False)) == []


@pytest.mark.parametrize("command", [["inventory", "check"], ["plan"],
                                     ["deploy", "--check", "--yes"]])
def test_commands_refuse_with_one_line_and_exit_2(tmp_path, command):
    path = inventory(tmp_path, extra_args="[--swap-space, '4']")
    result = subprocess.run([sys.executable, "-m", "ascendctl", *command, "-i", str(path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines == [f"error: {path}:{EXTRA_ARGS_LINE}: all.vars.serving.extra_args[0]: "
                     + lines[0].split("extra_args[0]: ", 1)[1]]
    assert "Traceback" not in result.stderr


def test_inventory_check_prints_the_warnings(tmp_path):
    path = inventory(tmp_path, env="{VLLM_ASCEND_ENABLE_CONTEXT_PARALLEL: '1'}")
    result = subprocess.run([sys.executable, "-m", "ascendctl", "inventory", "check", "-i",
                             str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"warning: {path}:{ENV_LINE}: all.vars.serving.env." in result.stderr


@pytest.mark.parametrize("argv", [
    [f"--max-num-seq{'s' if i % 2 else ''}" for i in range(20000)],   # abbreviations
    [f"--zz{i}" for i in range(20000)],                                 # 20000 refusals
    [f"-z{i}" for i in range(20000)],
    ["--" + "a" * 1_000_000],
], ids=["abbreviated", "unknown-long", "unknown-short", "one-megabyte"])
def test_a_pathological_argv_is_checked_in_linear_time(argv):
    """An inventory holds at most 20000 values; CPU time (the machine may be loaded)."""
    schema = load_schema()
    schema.options("0.30.0rc1")
    started = time.process_time()
    found = check_options(schema, "0.30.0rc1", argvs=[Argv(argv, list(range(len(argv))))])
    elapsed = time.process_time() - started
    assert elapsed < 2.0, elapsed
    assert len(found) == (0 if argv[0].startswith("--max") else len(argv))
    assert all(len(f.message) < 1000 for f in found[:10])
