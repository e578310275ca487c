"""Release scope warnings (plan, deploy) and the tutorial flags of the pinned release,
through real inventories built from the reference one."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

from ascendctl.releases.sets import load_matrix
from ascendctl.releases.scope import model_identity, pinned_release, scope_warnings, tutorial_for
from ascendctl.plan.flags import engine_flags
from ascendctl.plan.inventory_plan import requested_layout
from tests.unit.test_plan_inventories import make_inventory, model, serving, set_nodes

ENV = {"ASCENDCTL_PLAIN": "1", "PATH": "/usr/bin:/bin"}


def pin(release: str, **model_fields):
    """Pin versions: to RELEASE's set (aarch64 torch_npu build where it has builds)."""
    row = load_matrix().find(release)

    def edit(data):
        python = row.python[1]
        builds = [b.version for b in row.torch_npu_builds
                  if b.python == python and b.arch == "aarch64"]
        versions = {"vllm_ascend": row.vllm_ascend, "vllm": row.vllm, "cann": row.cann,
                    "python": python, "torch_npu": (builds or [row.torch_npu])[0]}
        if row.hdk.version and not row.hdk.unverified:
            versions["driver"] = row.hdk.version
        data["all"]["vars"]["versions"] = versions
        model(data).update(model_fields)
    return edit


def test_the_reference_model_is_outside_the_model_restricted_releases(tmp_path):
    for release, names in (("0.26.0rc1", "Kimi K3 (a3, a5); GLM-5.2 (a3)"),
                           ("0.30.0rc1", "DeepSeek V4.1 (a3, a2); GLM-5.3 (a3, a2)")):
        inv = make_inventory(tmp_path, pin(release))
        [warning] = scope_warnings(inv)
        assert warning.startswith(f"model Eco-Tech/Qwen3.5-397B-A17B-w8a8-mtp is outside the "
                                  f"scope of vllm-ascend v{release}, which validates only ")
        assert names in warning


def test_releases_without_a_restriction_or_without_notes(tmp_path):
    assert scope_warnings(make_inventory(tmp_path)) == []                # v0.17.0rc1
    assert scope_warnings(make_inventory(tmp_path, pin("0.23.0.post1"))) == []
    [warning] = scope_warnings(make_inventory(tmp_path, pin("0.28.0rc1")))
    assert warning == ("vllm-ascend v0.28.0rc1 published no release notes: nothing states "
                       "which models or hardware it validates")


def test_a_validated_model_on_hardware_the_release_did_not_validate(tmp_path):
    inv = make_inventory(tmp_path, pin("0.27.1rc1", name="MiniMaxAI/MiniMax-M3-W8A8",
                                       builtin_config=None))
    [warning] = scope_warnings(inv)
    assert warning.startswith("vllm-ascend v0.27.1rc1 validates MiniMax-M3 on a3, a5 only, "
                              "not a2 (cluster.chip 910B3)")

    def on_a3(data):
        pin("0.27.1rc1", name="MiniMaxAI/MiniMax-M3-W8A8", builtin_config=None)(data)
        data["all"]["vars"]["cluster"].update(chip="Ascend910_93", npus_per_node=16)
        set_nodes(data, 2, npus=16)
        for rank, host in enumerate(data["all"]["children"]["ascend"]["hosts"].values()):
            host["super_pod_id"] = rank // 2
            host["super_device_ids"] = [37748736 + rank * 16 + i for i in range(16)]
        serving(data).update(tensor_parallel_size=16)
    assert scope_warnings(make_inventory(tmp_path, on_a3)) == []


def test_a_model_is_identified_by_name_config_or_directory_never_by_served_name(tmp_path):
    glm = make_inventory(tmp_path, pin("0.30.0rc1", name=None, builtin_config=None,
                                       source="/srv/models/GLM-5.3_W8A8", served_name="glm"))
    assert "glm-5.3-w8a8" in model_identity(glm.model)
    assert scope_warnings(glm) == []
    alias = make_inventory(tmp_path, pin("0.30.0rc1", name=None, builtin_config=None,
                                         source="/srv/models/mine", served_name="glm-5.3"))
    assert len(scope_warnings(alias)) == 1


def test_an_official_image_tag_names_the_release_when_versions_pin_none(tmp_path):
    def image_only(data):
        data["all"]["vars"]["versions"] = {}
        serving(data).pop("engine", None)
        data["all"]["vars"]["engine"] = {"kind": "container", "runtime": "podman",
                                         "image": "quay.io/ascend/vllm-ascend:v0.26.0rc1"}
    inv = make_inventory(tmp_path, image_only)
    assert pinned_release(inv).tag == "v0.26.0rc1"
    assert "outside the scope of vllm-ascend v0.26.0rc1" in scope_warnings(inv)[0]


def test_plan_prints_and_reports_the_scope_warning(tmp_path):
    make_inventory(tmp_path, pin("0.26.0rc1"))
    argv = [sys.executable, "-m", "ascendctl", "plan", "-i", str(tmp_path / "inventory.yaml")]
    text = subprocess.run(argv, capture_output=True, text=True, env=ENV)
    assert text.returncode == 0, text.stderr
    assert "warning: model Eco-Tech/Qwen3.5-397B-A17B-w8a8-mtp is outside the scope of " \
           "vllm-ascend v0.26.0rc1" in " ".join(text.stdout.split())
    data = json.loads(subprocess.run(argv + ["--json"], capture_output=True, text=True,
                                     env=ENV, check=True).stdout)
    assert any("v0.26.0rc1, which validates only Kimi K3" in w
               for w in data["requested"]["warnings"])


def closed_loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_deploy_check_warns_before_it_contacts_any_node(tmp_path):
    port = closed_loopback_port()

    def loopback(data):
        pin("0.30.0rc2")(data)
        data["all"]["vars"]["ssh"].update(port=port, connect_retries=0, connect_timeout=2,
                                          known_hosts=str(tmp_path / "known_hosts"))
        for n, host in enumerate(data["all"]["children"]["ascend"]["hosts"].values()):
            host["ansible_host"] = f"127.0.0.{n + 1}"
    (tmp_path / "known_hosts").write_text("")
    make_inventory(tmp_path, loopback)
    result = subprocess.run([sys.executable, "-m", "ascendctl", "deploy", "--check", "-i",
                             str(tmp_path / "inventory.yaml")], capture_output=True,
                            text=True, env=ENV, timeout=120)
    assert result.returncode != 0                   # nothing listens there
    first = " ".join(result.stderr.split("\n\n")[0].split())
    assert first.startswith("warning: model Eco-Tech/Qwen3.5-397B-A17B-w8a8-mtp is outside "
                            "the scope of vllm-ascend v0.30.0rc2"), result.stderr[:400]


def flags_for(inv):
    return engine_flags(inv.serving, inv.model, requested_layout(inv), checkpoint_dtype=None,
                        tutorial=tutorial_for(pinned_release(inv), inv.model))


def test_the_tutorial_flags_of_the_pinned_release(tmp_path):
    old = flags_for(make_inventory(tmp_path, pin("0.18.0")))
    assert old[-3:] == ["--seed", "1024", "--async-scheduling"]
    spec = json.loads(old[old.index("--speculative-config") + 1])
    assert spec == {"method": "qwen3_5_mtp", "num_speculative_tokens": 3, "enforce_eager": True}
    new = flags_for(make_inventory(tmp_path, pin("0.23.0.post1")))
    assert new[-2:] == ["--seed", "1024"] and "--async-scheduling" not in new
    assert "enforce_eager" not in new[new.index("--speculative-config") + 1]
    # another model: no tutorial flags
    other = flags_for(make_inventory(tmp_path, pin("0.18.0", name="Qwen/Qwen3-235B-A22B",
                                                   builtin_config="qwen3-235b-a22b",
                                                   source="/srv/models/Qwen3-235B-A22B")))
    assert "--seed" not in other and "enforce_eager" not in " ".join(other)


def test_the_inventory_overrides_the_tutorial(tmp_path):
    def own(data):
        pin("0.18.0")(data)
        serving(data)["extra_args"] = ["--seed=7", "--no-async-scheduling"]
        serving(data)["speculative_config"] = {"method": "qwen3_5_mtp",
                                               "num_speculative_tokens": 3,
                                               "enforce_eager": False}
    flags = flags_for(make_inventory(tmp_path, own))
    assert flags[-2:] == ["--seed=7", "--no-async-scheduling"]
    assert flags.count("--seed") == 0 and "--async-scheduling" not in flags
    assert json.loads(flags[flags.index("--speculative-config") + 1])["enforce_eager"] is False

    def no_mtp(data):
        pin("0.18.0")(data)
        serving(data)["speculative_config"] = None
    bare = flags_for(make_inventory(tmp_path, no_mtp))
    assert "--speculative-config" not in bare and bare[-3:] == ["--seed", "1024",
                                                                 "--async-scheduling"]
