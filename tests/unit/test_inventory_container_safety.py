"""A container engine's mounts and options: none over the run's own destinations, none that
weakens the engine's isolation unless engine.allow_unsafe names it (and no name that
nothing uses) — through the real loader, at the line of the offending item."""

from __future__ import annotations

import pytest
import yaml

from ascendctl.errors import InputError
from ascendctl.load import load_inventory
from ascendctl.inventory.container_safety import (
    SAFE_CAPABILITIES, capability, confining, mount_risk, normalised, relation, security_opt,
)
from ascendctl.render import release_dir
from ascendctl.engine.container_run import reserved_targets
from ascendctl.render.engine import engine_argv, engine_environment
from tests.unit.test_engine_container_render import IMAGE_ID
from tests.unit.test_plan_inventories import example_data

ROOT = "/var/lib/ascendctl"


def write(tmp_path, engine: dict, *, model_path: str | None = None):
    data = example_data()
    variables = data["all"]["vars"]
    variables["serving"].pop("engine", None)
    variables["engine"] = {"kind": "container", "runtime": "podman",
                           "image": "quay.io/ascend/vllm-ascend:v0.23.0.post1", **engine}
    if model_path:
        variables["model"].pop("source")
        variables["model"]["path"] = model_path
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def refused(path) -> InputError:
    with pytest.raises(InputError) as caught:
        load_inventory(path, check_files=False)
    assert caught.value.exit_code == 2 and "\n" not in str(caught.value)
    return caught.value


def line_of(path, needle: str, start: int = 0) -> int:
    lines = path.read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if i > start and needle in text)


# -- the run's own destinations ----------------------------------------------------------

@pytest.mark.parametrize("model_path", [None, "/shared/models/qwen"])
def test_reserved_targets_cover_every_destination_the_run_gives(tmp_path, model_path):
    """The single list the loader checks is complete: every --volume destination and
    --device of a rendered run (other than engine.mounts) is one of them or inside one."""
    from ascendctl.engine.container_run import launch_argv

    inv = load_inventory(write(tmp_path, {"mounts": [{"source": "/srv/cache",
                                                      "target": "/root/.cache"}]},
                               model_path=model_path), check_files=False)
    host = inv.host("node0")
    release = release_dir(inv.deploy.root, "r1")
    argv = launch_argv(inv, release=release, host_argv=engine_argv(inv, host, release,
                                                                   checkpoint_dtype=None),
                       env_names=[k for k, _ in engine_environment(inv, host, release)],
                       image=IMAGE_ID, secrets_file=f"{release}/secrets.env")
    destinations = [a.split("=", 1)[1].split(":")[1] for a in argv if a.startswith("--volume=")]
    destinations += [a.split("=", 1)[1] for a in argv if a.startswith("--device=")]
    destinations.remove("/root/.cache")
    reserved = [path for path, _ in reserved_targets(root=inv.deploy.root,
                                                     model_path=inv.model.path)]
    assert len(destinations) >= 18
    for destination in destinations:
        assert any(relation(destination, own) in ("is", "is inside") for own in reserved), \
            destination


@pytest.mark.parametrize("target,how,own", [
    ("/run/ascendctl/secrets.env", "is", "/run/ascendctl/secrets.env"),
    ("/run", "contains", "/run/ascendctl/secrets.env"),
    ("/usr/local/dcmi/lib", "is inside", "/usr/local/dcmi"),
    ("/usr", "contains", "/usr/local/dcmi"),
    ("/etc/ascend_install.info", "is", "/etc/ascend_install.info"),
    ("/var/lib/ascendctl/store", "is inside", ROOT),
    ("/var/lib", "contains", ROOT),
    ("/dev/shm", "is inside", "/dev"),
])
def test_a_mount_over_the_runs_own_destination_is_refused(tmp_path, target, how, own):
    path = write(tmp_path, {"mounts": [{"source": "/srv/cache", "target": "/root/.cache"},
                                       {"source": "/srv/x", "target": target}]})
    error = refused(path)
    assert error.field == "all.vars.engine.mounts[1].target"
    assert error.line == line_of(path, f"target: {target}")
    assert f"{how} {own}, where ascendctl mounts" in str(error)
    assert "refuse a second mount there when the engine starts" in str(error)


def test_the_shared_model_path_and_tmpfs_are_destinations_too(tmp_path):
    error = refused(write(tmp_path, {"mounts": [{"source": "/srv/x",
                                                 "target": "/shared/models/qwen/cache"}]},
                          model_path="/shared/models/qwen"))
    assert "is inside /shared/models/qwen, where ascendctl mounts the shared model path" \
        in str(error)
    path = write(tmp_path, {"options": ["--init", "--tmpfs=/usr/local/dcmi:size=1m"]})
    error = refused(path)
    assert error.field == "all.vars.engine.options[1]" and "is /usr/local/dcmi" in str(error)


def test_a_mount_next_to_the_runs_own_loads(tmp_path):
    inv = load_inventory(write(tmp_path, {"mounts": [
        {"source": "/srv/cache", "target": "/root/.cache", "read_only": False},
        {"source": "/srv/run", "target": "/run-extra"},            # not inside /run
        {"source": "/srv/local", "target": "/usr/local/dcmi-tools"},
    ]}), check_files=False)
    assert [m.target for m in inv.engine.mounts][1:] == ["/run-extra", "/usr/local/dcmi-tools"]
    assert inv.unsafe_engine_options == ()


# -- what counts as unsafe -----------------------------------------------------------------

@pytest.mark.parametrize("text,expected", [
    ("SYS_ADMIN", "SYS_ADMIN"), ("sys_admin", "SYS_ADMIN"), ("CAP_SYS_ADMIN", "SYS_ADMIN"),
    ("all", "ALL"), ("FOO", None), ("", None), ("CAP_", None),
])
def test_capability_names(text, expected):
    assert capability(text) == expected


def test_the_safe_capabilities_are_real_ones():
    assert all(capability(cap) == cap for cap in SAFE_CAPABILITIES)
    assert not {"SYS_ADMIN", "NET_ADMIN", "NET_RAW", "SYS_MODULE", "SYS_RAWIO",
                "DAC_READ_SEARCH", "BPF"} & SAFE_CAPABILITIES


@pytest.mark.parametrize("value,safe", [
    ("no-new-privileges", True), ("no-new-privileges=true", True),
    ("no-new-privileges:true", True), ("no-new-privileges=false", False),
    ("seccomp=/etc/containers/seccomp.json", True), ("seccomp=unconfined", False),
    ("seccomp:unconfined", False), ("apparmor=docker-default", True),
    ("apparmor=unconfined", False), ("label=disable", False), ("label=type:spc_t", False),
    ("label=level:s0:c100,c200", True), ("label=user:system_u", True), ("label=nested", False),
    ("systempaths=unconfined", False), ("unmask=ALL", False), ("mask=/proc/acpi", True),
    ("proc-opts=hidepid=0", False),
])
def test_security_opts_that_only_confine(value, safe):
    assert confining(*security_opt(value)) is safe


@pytest.mark.parametrize("source,read_only,reason", [
    ("/proc", True, "/proc"), ("/sys/fs/cgroup", True, "/sys"), ("/dev", True, "/dev"),
    ("/var/run/docker.sock", True, "runtime's socket"), ("/run/podman", True, "runtime's"),
    ("/run/user/0/podman/podman.sock", True, "a socket"),
    ("/var/lib/containers/storage", True, "runtime's"), ("/var/lib", True, "runtime's"),
    ("/root/.ssh", True, ".ssh"), ("/home/ops/.ssh/id_ed25519", True, ".ssh"),
    ("/etc/shadow", True, "password hashes"), ("/etc/ssh", True, "SSH host keys"),
    ("/etc", True, "contains /etc/shadow"), ("/etc", False, "/etc), writable"),
    ("/etc/pki", False, "/etc), writable"), ("/usr", True, "system directory /usr"),
    ("/home", True, "system directory"), ("/tmp", True, "system directory"),
    (ROOT, False, "deploy root"), (f"{ROOT}/store", False, "deploy root"),
    ("/etc/hosts", True, None), ("/etc/pki", True, None), (f"{ROOT}/store", True, None),
    ("/srv/cache", False, None), ("/usr/share/zoneinfo", True, None),
])
def test_mount_sources(source, read_only, reason):
    why = mount_risk(source, read_only, ROOT)
    if reason is None:
        assert why is None
    else:
        assert why is not None and reason in why


@pytest.mark.parametrize("name,same", [
    ("cap-add:sys_admin", "cap-add:SYS_ADMIN"), ("cap-add:CAP_NET_ADMIN", "cap-add:NET_ADMIN"),
    ("security-opt:seccomp:unconfined", "security-opt:seccomp=unconfined"),
    ("security-opt:LABEL=disable", "security-opt:label=disable"),
    ("mount:/etc/pki/", "mount:/etc/pki"), ("privileged", "privileged"),
])
def test_acknowledgements_are_compared_in_one_spelling(name, same):
    assert normalised(name) == normalised(same) == same


# -- acknowledged or refused, through the loader -------------------------------------------

UNSAFE = [
    ({"options": ["--privileged"]}, "privileged", "options[0]"),
    ({"options": ["--init", "--cap-add=ALL"]}, "cap-add:ALL", "options[1]"),
    ({"options": ["--cap-add=CHOWN,sys_admin"]}, "cap-add:SYS_ADMIN", "options[0]"),
    ({"options": ["--cap-add=NET_RAW"]}, "cap-add:NET_RAW", "options[0]"),   # host network
    ({"options": ["--security-opt=seccomp=unconfined"]}, "security-opt:seccomp=unconfined",
     "options[0]"),
    ({"options": ["--security-opt=label:disable"]}, "security-opt:label=disable", "options[0]"),
    ({"mounts": [{"source": "/etc", "target": "/host/etc", "read_only": False}]}, "mount:/etc",
     "mounts[0].source"),
    ({"mounts": [{"source": "/var/run/docker.sock", "target": "/var/run/docker.sock"}]},
     "mount:/var/run/docker.sock", "mounts[0].source"),
    ({"mounts": [{"source": ROOT, "target": "/host/root", "read_only": False}]},
     f"mount:{ROOT}", "mounts[0].source"),
]


@pytest.mark.parametrize("engine,name,field", UNSAFE)
def test_an_unsafe_option_is_refused_unless_acknowledged(tmp_path, engine, name, field):
    path = write(tmp_path, engine)
    error = refused(path)
    assert error.field == f"all.vars.engine.{field}"
    assert f"{name} is unsafe" in str(error)
    assert f"acknowledge it with engine.allow_unsafe: [{name}]" in str(error)
    inv = load_inventory(write(tmp_path, {**engine, "allow_unsafe": [name]}), check_files=False)
    assert inv.unsafe_engine_options == (name,)


def test_safe_options_need_no_acknowledgement(tmp_path):
    inv = load_inventory(write(tmp_path, {"options": [
        "--cap-add=SYS_PTRACE", "--cap-add=ipc_lock,SYS_NICE", "--cap-drop=ALL",
        "--security-opt=no-new-privileges", "--security-opt=apparmor=docker-default",
        "--read-only", "--tmpfs=/scratch"]}), check_files=False)
    assert inv.unsafe_engine_options == ()


def test_every_use_is_named_once_in_field_order(tmp_path):
    inv = load_inventory(write(tmp_path, {
        "options": ["--privileged", "--cap-add=NET_ADMIN,SYS_ADMIN"],
        "mounts": [{"source": "/proc", "target": "/hostproc"}],
        "allow_unsafe": ["mount:/proc", "cap-add:sys_admin", "privileged", "cap-add:NET_ADMIN"]}),
        check_files=False)
    assert inv.unsafe_engine_options == ("privileged", "cap-add:NET_ADMIN", "cap-add:SYS_ADMIN",
                                         "mount:/proc")


def test_an_acknowledgement_nothing_uses_is_refused(tmp_path):
    path = write(tmp_path, {"options": ["--privileged"],
                            "allow_unsafe": ["privileged", "mount:/etc"]})
    error = refused(path)
    assert error.field == "all.vars.engine.allow_unsafe[1]"
    assert "'mount:/etc' acknowledges nothing" in str(error)


@pytest.mark.parametrize("item,words", [
    ("everything", "not an acknowledgement"), ("cap-add:FOO", "not a Linux capability"),
    ("mount:etc", "not an acknowledgement"), ("security-opt:", "not an acknowledgement"),
])
def test_malformed_acknowledgements(tmp_path, item, words):
    error = refused(write(tmp_path, {"allow_unsafe": [item]}))
    assert error.field == "all.vars.engine.allow_unsafe" and words in str(error)


def test_an_unknown_capability_is_refused(tmp_path):
    error = refused(write(tmp_path, {"options": ["--cap-add=SYS_ADMINN"]}))
    assert error.field == "all.vars.engine.options[0]"
    assert "'SYS_ADMINN' is not a Linux capability" in str(error)


def test_allow_unsafe_is_for_containers_only(tmp_path):
    data = example_data()
    data["all"]["vars"]["engine"] = {"allow_unsafe": ["privileged"]}
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    error = refused(path)
    assert error.field == "all.vars.engine.allow_unsafe"
    assert "applies to kind: container, not host" in str(error)


def test_ten_thousand_mounts_and_options_are_checked_in_linear_time():
    """The duplicate-target check was quadratic (list.count per mount: 15 000 mounts took
    10 s more); the collision and safety checks are one pass each."""
    import time

    from ascendctl.engine.kinds import section_problems
    from ascendctl.inventory.container_safety import engine_problems
    from ascendctl.inventory.engine import EngineSpec

    spec = EngineSpec.model_validate({
        "kind": "container", "runtime": "podman", "image": "localhost/x:1",
        "mounts": [{"source": f"/srv/s{i}", "target": f"/m/t{i}"} for i in range(10_000)],
        "options": ["--cap-add=SYS_PTRACE"] * 10_000})
    started = time.perf_counter()
    assert section_problems(spec) == []
    assert engine_problems(spec, deploy_root=ROOT,
                           reserved=reserved_targets(root=ROOT, model_path=None)) == []
    assert time.perf_counter() - started < 5.0          # 0.5 s measured
