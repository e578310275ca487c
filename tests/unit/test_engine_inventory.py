"""The inventory's engine: section and the release-set check, through the real loader."""

from __future__ import annotations

import pytest
import yaml

from ascendctl.errors import InputError
from ascendctl.load import load_inventory
from ascendctl.inventory.engine import EngineSpec
from tests.unit.test_plan_inventories import example_data

CONTAINER = {"kind": "container", "runtime": "podman",
             "image": "quay.io/ascend/vllm-ascend:v0.23.0.post1"}


def write(tmp_path, *, engine=None, versions=None, serving=None, chip=None, raw=None):
    data = example_data()
    variables = data["all"]["vars"]
    if engine is not None:
        variables["engine"] = engine
    if versions is not None:
        variables["versions"] = versions
    if serving is not None:
        variables["serving"].update(serving)
    if chip is not None:
        variables["cluster"]["chip"] = chip
    path = tmp_path / "inv.yaml"
    text = yaml.safe_dump(data, sort_keys=False)
    path.write_text(raw(text) if raw else text)
    return path


def load_error(path) -> InputError:
    with pytest.raises(InputError) as err:
        load_inventory(path, check_files=False)
    assert err.value.exit_code == 2
    return err.value


def line_of(path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def test_default_engine_is_the_host_executable(tmp_path):
    inv = load_inventory(write(tmp_path), check_files=False)
    assert inv.engine.kind == "host" and inv.serving.engine == "vllm"
    assert inv.public_dict()["engine"]["kind"] == "host"


def test_container_engine_loads(tmp_path):
    serving = {k: v for k, v in example_data()["all"]["vars"]["serving"].items()}
    data_path = write(tmp_path, engine={**CONTAINER, "archive": "~/images/vllm-ascend.tar",
                                        "mounts": [{"source": "/srv/cache", "target": "/root/.cache",
                                                    "read_only": False}],
                                        "options": ["--cap-add=SYS_PTRACE", "--init"]},
                      raw=lambda t: t.replace("      engine: vllm\n", ""))
    assert "engine: vllm" not in data_path.read_text() or serving
    inv = load_inventory(data_path, check_files=False)
    assert inv.engine.runtime_executable == "/usr/bin/podman"
    assert inv.engine.effective_shm_size is None      # host IPC: the node's /dev/shm


@pytest.mark.parametrize("engine,field,words", [
    ({**CONTAINER, "image": "-v /:/host"}, "engine.image", "not an image reference"),
    ({**CONTAINER, "image": "quay.io/x:tag\nExecStart=/bin/sh"}, "engine.image", "control"),
    ({**CONTAINER, "archive": "relative/x.tar"}, "engine.archive", "absolute"),
    ({**CONTAINER, "archive": "/srv/../etc/x.tar"}, "engine.archive", "not normalised"),
    ({**CONTAINER, "options": ["--env=VLLM_LOGGING_LEVEL=DEBUG"]}, "engine.options", "not an allowed"),
    ({**CONTAINER, "options": ["--label=token=abc"]}, "engine.options", "secret"),
    ({**CONTAINER, "options": ["--cap-add", "SYS_ADMIN"]}, "engine.options", "as one item"),
    ({**CONTAINER, "mounts": [{"source": "/a:b", "target": "/c"}]}, "engine.mounts", "':'"),
    ({**CONTAINER, "command": "--privileged"}, "engine.command", "leading"),
    ({**CONTAINER, "runtime": "containerd"}, "engine.runtime", "is not one of"),
    ({"kind": "venv", "wheelhouse": "/srv/wh", "packages": ["vllm; rm -rf /"]},
     "engine.packages", "distribution name"),
])
def test_hostile_values_are_refused_at_their_line(tmp_path, engine, field, words):
    path = write(tmp_path, engine=engine, raw=lambda t: t.replace("      engine: vllm\n", ""))
    err = load_error(path)
    assert f": all.vars.{field}" in str(err) and words in str(err)
    assert err.line is not None


@pytest.mark.parametrize("engine,field,words", [
    ({"kind": "container", "image": "localhost/x:1"}, "engine.runtime", "needs runtime"),
    ({"kind": "container", "runtime": "docker"}, "engine.image", "needs image"),
    ({**CONTAINER, "shm_size": "16g"}, "engine.shm_size", "ipc: private"),
    ({"kind": "venv"}, "engine.wheelhouse", "needs wheelhouse"),
    ({"kind": "venv", "wheelhouse": "/srv/wh", "image": "localhost/x:1"}, "engine.image",
     "kind: container"),
    ({"kind": "host", "command": "vllm"}, "engine.command", "serving.engine"),
])
def test_fields_that_do_not_fit_the_kind(tmp_path, engine, field, words):
    path = write(tmp_path, engine=engine, raw=lambda t: t.replace("      engine: vllm\n", ""))
    err = load_error(path)
    assert f": all.vars.{field}: " in str(err) and words in str(err)
    key = field.split(".")[-1]
    written = key in engine
    # a missing field is reported at its section's line
    assert err.line == line_of(path, f"{key}:" if written else "    engine:")


def test_serving_engine_with_a_container_is_refused(tmp_path):
    path = write(tmp_path, engine=CONTAINER)
    err = load_error(path)
    assert "serving.engine" in str(err) and "engine.command" in str(err)
    assert err.line == line_of(path, "engine: vllm")


def test_shm_size_with_private_ipc(tmp_path):
    path = write(tmp_path, engine={**CONTAINER, "ipc": "private", "shm_size": "16g"},
                 raw=lambda t: t.replace("      engine: vllm\n", ""))
    assert load_inventory(path, check_files=False).engine.effective_shm_size == "16g"


def test_a3_cluster_with_the_a2_image_is_refused(tmp_path):
    path = write(tmp_path, engine={**CONTAINER, "image": "quay.io/ascend/vllm-ascend:v0.23.0"},
                 versions={"vllm_ascend": "0.23.0"}, chip="Ascend910_93",
                 raw=lambda t: t.replace("      engine: vllm\n", ""))
    with pytest.raises(InputError) as err:
        load_inventory(path, check_files=False)
    # A3 also needs super pod ids; the image check must not be what passes silently
    assert "vllm-ascend" in str(err.value) or "super_pod_id" in str(err.value)


def test_image_tag_must_match_the_pinned_release(tmp_path):
    path = write(tmp_path, engine={**CONTAINER, "image": "quay.io/ascend/vllm-ascend:v0.18.0"},
                 raw=lambda t: t.replace("      engine: vllm\n", ""))
    err = load_error(path)
    assert "is vllm-ascend 0.18.0, but versions.vllm_ascend pins 0.23.0.post1" in str(err)
    assert ": all.vars.engine.image: " in str(err)


def test_the_example_is_a_release_set(tmp_path):
    inv = load_inventory(write(tmp_path), check_files=False)
    assert inv.versions.vllm_ascend == "0.23.0.post1"


def test_mix_in_no_set_names_the_nearest_row(tmp_path):
    path = write(tmp_path, versions={"driver": "25.3.rc1", "cann": "8.5.1", "python": "3.11",
                                     "torch_npu": "2.9.0", "vllm": "0.18.0",
                                     "vllm_ascend": "0.18.0"})
    err = load_error(path)
    text = str(err)
    assert "in no vllm-ascend release set" in text
    assert "nearest is v0.18.0" in text and "torch_npu 2.9.0 (the set has 2.9.0.post1+git4c901a4)" in text
    assert ": all.vars.versions.torch_npu: " in text
    assert err.line == line_of(path, "torch_npu:")


def test_lab_stack_without_vllm_ascend_is_not_checked(tmp_path):
    path = write(tmp_path, versions={"driver": "25.3.rc1", "cann": "8.5.1", "python": "3.11",
                                     "vllm": "0.32.0"})
    assert load_inventory(path, check_files=False).versions.vllm == "0.32.0"


def test_container_with_ray_mode_is_refused(tmp_path):
    path = write(tmp_path, engine=CONTAINER, serving={"mode": "ray", "data_parallel_size": 1,
                                                      "data_parallel_size_local": None,
                                                      "api_server_count": None},
                 raw=lambda t: t.replace("      engine: vllm\n", ""))
    err = load_error(path)
    assert "ray" in str(err) and ": all.vars.serving.mode: " in str(err)


def test_spec_paths_are_normalised():
    with pytest.raises(ValueError):
        EngineSpec(kind="venv", wheelhouse="/srv/wh/")
    assert EngineSpec(kind="venv", wheelhouse="~/wh").wheelhouse == "~/wh"
