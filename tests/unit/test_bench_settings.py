"""What `ascendctl bench` asks of `vllm bench serve`: the command line (flags checked
against vLLM 0.32's `vllm bench serve --help`), settings refused before anything runs,
and the NPU count the per-NPU figure divides by."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ascendctl.benchmark.settings import (
    BenchSettings, bench_argv, bench_executable, npus_serving, served_model, validate,
)
from ascendctl.errors import InputError
from ascendctl.load import load_inventory

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RELEASE = "/var/lib/ascendctl/releases/r-0123456789ab"


def inventory(tmp_path, **serving):
    data = yaml.safe_load((FIXTURES / "inventories" / "good.yaml").read_text())
    data["all"]["vars"]["serving"].update(serving)
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_inventory(path, check_files=False)


def flag(argv, name):
    return argv[argv.index(name) + 1]


def test_argv_runs_vllm_bench_serve_against_the_head_s_own_api(tmp_path):
    inv = inventory(tmp_path, engine="/opt/venv/bin/vllm", port=8123)
    settings = BenchSettings(input_len=32, output_len=16, concurrency=4, num_prompts=8)
    argv = bench_argv(inv, settings, executable=bench_executable(inv), release_dir=RELEASE)
    assert argv[:3] == ["/opt/venv/bin/vllm", "bench", "serve"]
    assert flag(argv, "--base-url") == "http://127.0.0.1:8123"
    assert flag(argv, "--endpoint") == "/v1/completions"
    assert flag(argv, "--model") == "tiny"                       # the served name
    assert flag(argv, "--tokenizer") == f"{RELEASE}/model"
    assert flag(argv, "--dataset-name") == "random"
    assert (flag(argv, "--random-input-len"), flag(argv, "--random-output-len")) == ("32", "16")
    assert (flag(argv, "--num-prompts"), flag(argv, "--max-concurrency")) == ("8", "4")
    assert flag(argv, "--request-rate") == "inf"
    assert "99" in flag(argv, "--metric-percentiles").split(",")
    # no secret and no result options here: the node adds them (key: environment only)
    assert not any("key" in arg.lower() for arg in argv)
    assert "--save-result" not in argv


def test_defaults_follow_the_slo_workload_and_prompts_scale_with_concurrency():
    settings = BenchSettings()
    assert (settings.input_len, settings.output_len, settings.concurrency) == (512, 256, 8)
    assert settings.prompts == 32
    assert BenchSettings(concurrency=2).prompts == 8
    assert BenchSettings(num_prompts=5).prompts == 5


def test_executable_is_next_to_the_engine_or_on_path(tmp_path):
    assert bench_executable(inventory(tmp_path, engine="/opt/vllm/bin/vllm")) == \
        "/opt/vllm/bin/vllm"
    assert bench_executable(inventory(tmp_path, engine="/srv/env/bin/vllm-wrapper")) == \
        "/srv/env/bin/vllm"
    assert bench_executable(inventory(tmp_path)) == "vllm"


def test_model_name_without_served_name_is_the_path_vllm_serve_was_given(tmp_path):
    data = yaml.safe_load((FIXTURES / "inventories" / "good.yaml").read_text())
    del data["all"]["vars"]["model"]["served_name"]
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data))
    inv = load_inventory(path, check_files=False)
    assert served_model(inv, RELEASE) == f"{RELEASE}/model"


@pytest.mark.parametrize("serving,npus", [
    ({"mode": "mp", "pipeline_parallel_size": 2}, 2),
    ({"mode": "mp", "tensor_parallel_size": 2, "pipeline_parallel_size": 2}, 4),
    ({"mode": "dp", "pipeline_parallel_size": 1, "tensor_parallel_size": 2,
      "data_parallel_size": 2, "data_parallel_size_local": 1}, 4),
])
def test_npus_serving_is_the_world_size(tmp_path, serving, npus):
    assert npus_serving(inventory(tmp_path, **serving)) == npus


def test_settings_the_deployment_cannot_serve_are_refused(tmp_path):
    inv = inventory(tmp_path)     # max_model_len 256
    with pytest.raises(InputError, match=r"inv.yaml: serving.max_model_len: --input-len 200 "
                                         r"\+ --output-len 100 = 300 tokens exceeds"):
        validate(BenchSettings(input_len=200, output_len=100), inv)
    with pytest.raises(InputError, match="--num-prompts must be at least 1"):
        validate(BenchSettings(input_len=8, output_len=8, num_prompts=0), inv)
    assert validate(BenchSettings(input_len=8, output_len=8), inv).prompts == 32
