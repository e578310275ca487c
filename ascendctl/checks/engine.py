"""The serving engine (docs/engine.md): checks over the facts of ascendctl/facts/engine.py
and the inventory's `EngineExpectation` — the container runtime, the release's image and
the CANN inside it against the host's driver, the host's driver against the release set
(host and venv engines), nothing else holding the node's NPUs, and the unsafe container
options the inventory acknowledges."""

from __future__ import annotations

from collections.abc import Mapping

from ascendctl.checks.compat import load_matrix
from ascendctl.checks.expectations import Expectations
from ascendctl.checks.model import Outcome, Severity, Status
from ascendctl.checks.registry import cluster_check, node_check
from ascendctl.checks.versions import engine_packages, matches_pin
from ascendctl.facts.engine import (
    ENGINE_CONTAINERS, ENGINE_IMAGE_CANN, ENGINE_IMAGES, ENGINE_RUNTIME, NPU_HOLDERS,
    ContainerInfo, DeviceHolder,
)
from ascendctl.facts.node import NodeFacts
from ascendctl.facts.versions import try_parse_version


def _needs_runtime(exp: Expectations) -> Outcome | None:
    if exp.engine.runtime is None:
        return Outcome.skip(f"engine.kind {exp.engine.kind}: no container runtime")
    return None


@node_check(
    "engine.runtime", category="engine", severity=Severity.FAIL,
    title="the container runtime is installed and answers",
    catches="engine.kind container on a node without the runtime (`podman`/`docker` not at "
            "engine.runtime_path), or a docker whose daemon does not answer",
    remediation="apt-get install podman (or docker.io; then systemctl enable --now docker), or "
                "set engine.runtime_path",
)
def runtime(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    if (skip := _needs_runtime(exp)) is not None:
        return skip
    found = facts[ENGINE_RUNTIME]
    if found is None:
        return Outcome.skip("runtime not read (" + (facts.problem("engine_runtime") or
                                                    "not gathered") + ")")
    if not found.installed:
        return Outcome(Status.FAIL, f"{found.runtime} is not installed on this node",
                       f"apt-get install {found.runtime if found.runtime == 'podman' else 'docker.io'}")
    if not found.usable:
        return Outcome(Status.FAIL, f"{found.runtime} does not answer: {found.error or 'no version'}",
                       "systemctl enable --now docker" if found.runtime == "docker" else
                       f"{found.runtime} version  # and fix what it says")
    version = found.version
    assert version is not None
    server = f", server {version.server}" if found.runtime == "docker" else ""
    return Outcome.ok(f"{found.runtime} {version.client}{server}")


@cluster_check(
    "engine.image", category="engine", severity=Severity.FAIL,
    title="the release's image is on every node, or an archive brings it",
    catches="engine.image missing on a node while the inventory gives no engine.archive (the "
            "deploy would refuse), nodes holding different images under the same reference, "
            "or an archive that cannot be read (truncated, corrupt)",
    remediation="set engine.archive to a `save` tarball of the image, or load the same image on "
                "every node (<runtime> load -i IMAGE.tar)",
)
def image(facts: Mapping[str, NodeFacts], exp: Expectations) -> dict[str, Outcome]:
    engine = exp.engine
    if engine.image is None:
        return {n: Outcome.skip(f"engine.kind {engine.kind}: no image") for n in facts}
    if engine.archive:
        if engine.archive_error:
            return {n: Outcome(Status.FAIL, f"engine.archive unreadable: {engine.archive_error}",
                               f"write the archive again: <runtime> save -o {engine.archive} "
                               f"{engine.image}") for n in facts}
        wanted = engine.archive_image_id or ""
        out = {}
        for name, f in facts.items():
            images = f[ENGINE_IMAGES]
            there = images.id_of(wanted) if images else None
            out[name] = Outcome.ok(f"{engine.image} {wanted[7:19]} "
                                   + ("present" if there else "loaded from the archive by deploy"))
        return out
    held = {}
    out = {}
    for name, f in facts.items():
        images = f[ENGINE_IMAGES]
        if images is None:
            out[name] = Outcome.skip("images not read (" + (f.problem("engine_images") or
                                                             "runtime not installed") + ")")
            continue
        image_id = images.id_of(engine.image or "")
        if image_id is None:
            out[name] = Outcome(Status.FAIL, f"{engine.image} is not on this node and the "
                                "inventory gives no engine.archive",
                                f"set engine.archive, or: <runtime> load -i IMAGE.tar on {name}")
        else:
            held[name] = image_id
    ids = sorted(set(held.values()))
    for name, image_id in held.items():
        if len(ids) > 1:
            others = ", ".join(f"{i[7:19]} on {', '.join(sorted(n for n, v in held.items() if v == i))}"
                               for i in ids if i != image_id)
            out[name] = Outcome(Status.FAIL, f"{engine.image} is {image_id[7:19]} here, {others}",
                                "load the same image on every node (or give engine.archive)")
        else:
            out[name] = Outcome.ok(f"{engine.image} present ({image_id[7:19]})")
    return {n: out[n] for n in facts}


@node_check(
    "engine.image_cann", category="engine", severity=Severity.FAIL,
    title="the image's CANN works with the node's driver",
    catches="a container image whose CANN toolkit (read from the image, or from the archive "
            "before it is loaded) does not list the host driver's Innerversion in its "
            "compatible_version, a driver older than the HDK every release set of that CANN "
            "was validated with, or a CANN other than versions.cann pins",
    remediation="run an image built for this driver (the vllm-ascend release set whose CANN "
                "accepts it: `ascendctl engine release-set --list`), or upgrade the driver",
)
def image_cann(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    if (skip := _needs_runtime(exp)) is not None:
        return skip
    cann = facts[ENGINE_IMAGE_CANN]
    source = "image"
    if (cann is None or not cann.files) and exp.engine.archive_cann is not None:
        cann, source = exp.engine.archive_cann, "archive"
    if cann is None:
        return Outcome.skip("the image is not on the node and no archive was read (see engine.image)")
    if not cann.found:
        return Outcome(Status.WARN, f"no CANN version files in the {source} "
                       "(ascend-toolkit/latest or cann/latest)",
                       "use a vllm-ascend image (quay.io/ascend/vllm-ascend:<version>), which "
                       "carries its CANN")
    text = f"the {source}'s CANN {cann.version}"
    problems = []
    driver = facts.driver
    if driver is None or driver.inner_code is None:
        return Outcome.skip(f"{text}; no driver Innerversion to compare (see versions.driver_firmware)")
    toolkit = cann.toolkit
    if toolkit is not None and toolkit.compatible_inner and not toolkit.accepts_driver(driver.inner_code):
        listed = ",".join(map(str, toolkit.compatible_inner))
        problems.append(f"does not list driver {driver.version} ({driver.inner_code}); it accepts {listed}")
    version = try_parse_version(cann.version)
    have = try_parse_version(driver.version)
    if version is not None and have is not None:
        sets = [r for r in load_matrix().releases_with_cann(version) if r.hdk is not None]
        if sets and all(have < r.hdk for r in sets):   # type: ignore[operator]
            lowest = min(r.hdk for r in sets)          # type: ignore[type-var]
            problems.append(f"was validated with HDK {lowest} or newer "
                            f"(vllm-ascend {', '.join(r.vllm_ascend.text for r in sets)}); the "
                            f"driver is {driver.version}")
    pin = exp.versions.cann
    if pin and not matches_pin(cann.version or "", pin):
        problems.append(f"is not the pinned versions.cann {pin}")
    if problems:
        return Outcome(Status.FAIL, f"{text} " + "; ".join(problems),
                       "run an image whose CANN accepts this driver, or install the driver "
                       "its release set names")
    return Outcome.ok(f"{text} accepts driver {driver.version} ({driver.inner_code})")


@node_check(
    "engine.hdk", category="engine", severity=Severity.FAIL,
    title="the driver is at least the HDK the engine's release set was validated with",
    catches="a host or venv engine whose vllm-ascend release set names a validated HDK newer "
            "than the node's driver (e.g. v0.23.0 with HDK 26.0.RC1 on a 25.x driver)",
    remediation="upgrade the driver and firmware to the set's HDK, or use the release set "
                "made for this driver",
)
def hdk(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    if exp.engine.stack_from is not None:
        return Outcome.skip(f"engine.kind {exp.engine.kind}: see engine.image_cann")
    va = try_parse_version(engine_packages(facts, exp).get("vllm_ascend"))
    if va is None:
        return Outcome.skip("no vllm-ascend in the engine: no release set applies")
    row = load_matrix().release_for(va)
    if row is None:
        return Outcome.skip(f"vllm-ascend {va} is in no release set (see versions.python_stack)")
    if row.hdk is None:
        return Outcome.skip(f"no source states the HDK of vllm-ascend {va}")
    driver = facts.driver
    have = try_parse_version(driver.version) if driver else None
    if have is None:
        return Outcome.skip("driver version not read (see versions.driver_firmware)")
    if have < row.hdk:
        return Outcome(Status.FAIL, f"driver {driver.version} is older than HDK {row.hdk}, which "
                       f"vllm-ascend {va} was validated with",
                       f"install HDK {row.hdk} (driver and firmware), then reboot")
    return Outcome.ok(f"driver {driver.version} >= HDK {row.hdk} of vllm-ascend {va}")


@node_check(
    "engine.npu_holders", category="engine", severity=Severity.FAIL,
    title="nothing else holds the node's NPU devices",
    catches="a process with /dev/davinci* (or davinci_manager, devmm_svm, hisi_hdc) open, or a "
            "running container given those devices, that is not ascendctl's own engine (a "
            "leftover engine, another team's container): the new engine would fail to open "
            "the NPUs or share their HBM",
    remediation="stop it (systemctl stop UNIT, or <runtime> stop NAME), then deploy again",
)
def npu_holders(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    engine = exp.engine
    holders = facts[NPU_HOLDERS]
    if holders is None:
        return Outcome.skip("device holders not read (" + (facts.problem("npu_holders") or
                                                           "not gathered") + ")")
    listed = {p.pid for p in facts.npu_smi.processes} if facts.npu_smi else set()
    others: list[str] = []
    allowed: list[DeviceHolder | ContainerInfo] = []
    for proc in holders.processes:
        own = engine.allow_own and (proc.unit or "").startswith("ascendctl-")
        if own or proc.pid in exp.allowed_npu_pids:
            allowed.append(proc)
        elif proc.pid not in listed:           # npu.processes reports those
            others.append(f"pid {proc.pid} ({proc.comm}"
                          + (f", {proc.unit}" if proc.unit else "") + ") has "
                          + " ".join(d.removeprefix("/dev/") for d in proc.devices) + " open")
    containers = facts[ENGINE_CONTAINERS]
    for box in containers.holding_npus if containers else ():
        if engine.allow_own and box.name == engine.own_container:
            allowed.append(box)
            continue
        others.append(f"container {box.name} ({box.image}) is given "
                      + " ".join(d.removeprefix("/dev/") for d in box.devices))
    if others:
        fix = []
        for text in others:
            if text.startswith("container "):
                fix.append(f"{engine.runtime or 'podman'} stop {text.split()[1]}")
            elif ", " in text and ".service" in text:
                fix.append("systemctl stop " + text.split(", ")[1].split(")")[0])
            else:
                fix.append("kill " + text.split()[1])
        return Outcome(Status.FAIL, "; ".join(others), "; ".join(fix))
    if allowed:
        return Outcome.ok(f"only ascendctl's own engine holds the NPUs ({len(allowed)} "
                          f"process(es)/container(s))")
    return Outcome.ok("no process or container holds the NPU devices")


@node_check(
    "engine.unsafe", category="engine", severity=Severity.WARN,
    title="the engine container runs without unsafe options or mounts",
    catches="a container engine that engine.allow_unsafe lets weaken its isolation from the "
            "node: --privileged, added capabilities outside docker's default set (or "
            "NET_RAW), seccomp, AppArmor or SELinux confinement removed, mounts of /proc, "
            "/sys, /dev, a top-level system directory, /etc writable, a container runtime's "
            "socket or the deploy root writable",
    remediation="drop the option or mount and its engine.allow_unsafe entry unless the "
                "engine really needs it",
)
def unsafe(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    if (skip := _needs_runtime(exp)) is not None:
        return skip
    if not exp.engine.unsafe:
        return Outcome.ok("no unsafe options or mounts")
    names = ", ".join(exp.engine.unsafe)
    return Outcome(Status.FAIL, f"the engine runs with unsafe options acknowledged in "
                   f"engine.allow_unsafe: {names}",
                   f"remove {names} from engine.options/engine.mounts and "
                   "engine.allow_unsafe unless the engine really needs them")
