"""The engine as a container: the `run` command line the launcher starts, and what the
unit's stop and removal run (ascendctl/engine/kinds/container.py launches with them).

What the run gives the container (vllm-ascend quick start, FACTS.md):
- host network and host IPC (multi-node collectives, shared memory between ranks); with
  `ipc: private`, a /dev/shm of `shm_size` instead (podman refuses both at once);
- every NPU of the node, `/dev/davinci0..N-1`, and `/dev/davinci_manager`,
  `/dev/devmm_svm`, `/dev/hisi_hdc`;
- the driver files, read-only: `/usr/local/dcmi`, `/usr/local/bin/npu-smi`,
  `/usr/local/Ascend/driver/lib64`, `/usr/local/Ascend/driver/version.info`,
  `/etc/ascend_install.info`;
- the release's model directory and the weights store it links into (or the shared
  model path), and the rank table, read-only, at the paths the engine's argv names;
- the engine environment by name only (`--env NAME`: the runtime takes the value from
  its own environment, which systemd loads from engine.env);
- the API key through a read-only mount of the release's secrets.env (0600), sourced by
  `sh` inside the container just before it execs the engine: the key is in no argv and
  not in the container's recorded configuration (`inspect`);
- the engine command as the container's command, after the image's own ENTRYPOINT: CANN's
  sets the toolkit's environment there (not all of it is also in the image's ENV).

`--rm` plus `--replace` (podman) or a removal before the start (docker), a stop command
for ExecStop and a forced removal in ExecStopPost: stop, restart and a killed main
process leave no container behind. Same inputs, same bytes.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass

from ascendctl.inventory.engine import EngineSpec

CONTAINER_NAME = "ascendctl-engine"
SECRETS_IN_CONTAINER = "/run/ascendctl/secrets.env"
NPU_CONTROL_DEVICES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
DRIVER_MOUNTS = ("/usr/local/dcmi", "/usr/local/bin/npu-smi", "/usr/local/Ascend/driver/lib64",
                 "/usr/local/Ascend/driver/version.info", "/etc/ascend_install.info")
SOURCE_SECRETS = 'set -a; . "$0"; set +a; exec "$@"'
# The runtime's own /dev (the NPU devices are given there; /dev/shm with either IPC mode).
DEVICES_IN_CONTAINER = "/dev"


def reserved_targets(*, root: str, model_path: str | None) -> tuple[tuple[str, str], ...]:
    """(path, what is there) for every destination the run gives the container itself, for
    any release of the deploy root `root`: engine.mounts must not be at, inside or above
    one of them (podman and docker refuse a duplicate destination when the engine starts,
    after the old engines were stopped). The deploy root stands for what read_only_paths
    mounts from it: each release's model directory and rank table, and the weights store."""
    targets = [(path, "the NPU driver files") for path in DRIVER_MOUNTS]
    targets += [(SECRETS_IN_CONTAINER, "the API key file"),
                (DEVICES_IN_CONTAINER, "the NPU devices and the runtime's own /dev"),
                (root, "the releases and the weights store of deploy.root")]
    if model_path:
        targets.append((model_path, "the shared model path (model.path)"))
    return tuple(targets)


@dataclass(frozen=True)
class ContainerRun:
    """Everything the run needs that is not in the EngineSpec."""

    image: str                       # what to run: the image ID of the release's identity
    engine_argv: Sequence[str]       # the engine command inside the container
    env_names: Sequence[str]         # variables passed through by name
    npus: int                        # /dev/davinci0..npus-1
    read_only_paths: Sequence[str]   # model dir, store, rank table (same path inside)
    secrets_file: str | None = None  # the release's secrets.env, or None without secrets
    name: str = CONTAINER_NAME


def npu_devices(npus: int) -> list[str]:
    return [f"/dev/davinci{i}" for i in range(npus)] + list(NPU_CONTROL_DEVICES)


def _mount(source: str, target: str, read_only: bool) -> str:
    for path in (source, target):
        if not path.startswith("/") or "," in path or ":" in path:
            raise ValueError(f"mount path {path!r} must be absolute without ',' or ':'")
    return f"--volume={source}:{target}" + (":ro" if read_only else "")


def run_argv(spec: EngineSpec, run: ContainerRun) -> list[str]:
    """`podman|docker run ...` in the foreground (the launcher supervises it)."""
    if spec.runtime is None:
        raise ValueError("run_argv needs an engine with a container runtime")
    argv = [spec.runtime_executable, "run", "--rm", f"--name={run.name}"]
    if spec.runtime == "podman":
        # passthrough: the engine's output goes to the journal once (not also to a file)
        argv += ["--replace", "--log-driver=passthrough"]
    else:
        argv += ["--log-driver=none", "--sig-proxy=true"]
    # --init: the engine is not PID 1 of the container, which would ignore SIGTERM (the
    # kernel drops signals PID 1 has no handler for: a headless vLLM rank then waits for
    # SIGKILL at every stop); the runtime's init forwards it and reaps the workers
    argv += ["--init", "--pull=never", "--network=host", f"--ipc={spec.ipc}"]
    if spec.effective_shm_size:
        argv.append(f"--shm-size={spec.effective_shm_size}")
    argv += [f"--device={device}" for device in npu_devices(run.npus)]
    argv += [_mount(path, path, True) for path in DRIVER_MOUNTS]
    seen = set(DRIVER_MOUNTS)
    for path in run.read_only_paths:
        normal = posixpath.normpath(path)
        if normal not in seen:
            seen.add(normal)
            argv.append(_mount(normal, normal, True))
    for mount in spec.mounts:
        argv.append(_mount(mount.source, mount.target, mount.read_only))
    for name in dict.fromkeys(run.env_names):
        argv.append(f"--env={name}")
    argv += list(spec.options)
    command = list(run.engine_argv)
    if not command:
        raise ValueError("empty engine command")
    if run.secrets_file is not None:
        argv.append(_mount(run.secrets_file, SECRETS_IN_CONTAINER, True))
        command = ["/bin/sh", "-c", SOURCE_SECRETS, SECRETS_IN_CONTAINER, *command]
    # no --entrypoint: the image's runs first and execs this command with its environment
    # vllm-ascend v0.23.0 Dockerfile: no ENTRYPOINT; its base's (Ascend/cann-container-image cann/9.1.0-beta.3-910b-ubuntu22.04-py3.12/Dockerfile) sources the toolkit's, ascendnpu-ir's and atb's set_env.sh, then exec "$@"
    return argv + [run.image, *command]


def stop_argv(spec: EngineSpec, name: str = CONTAINER_NAME) -> list[str]:
    argv = [spec.runtime_executable, "stop"]
    if spec.runtime == "podman":
        argv.append("--ignore")
    return argv + [f"--time={spec.stop_timeout}", name]


def remove_argv(spec: EngineSpec, name: str = CONTAINER_NAME) -> list[str]:
    argv = [spec.runtime_executable, "rm", "--force"]
    if spec.runtime == "podman":
        argv.append("--ignore")
    return argv + [name]


def engine_command(spec: EngineSpec, host_argv: Sequence[str]) -> list[str]:
    """The engine argv inside the container: render.engine's argv with the executable
    replaced by engine.command."""
    return [spec.command, *list(host_argv)[1:]]


def read_only_paths(*, release: str, root: str, model_source: bool,
                    model_path: str | None) -> list[str]:
    """What the engine reads: the release's model directory (symlinks into the store, or
    to the shared model path), the store or that path, and the rank table."""
    paths = [f"{release}/model"]
    if model_source:
        paths.append(f"{root.rstrip('/')}/store")
    elif model_path:
        paths.append(model_path)
    paths.append(f"{release}/hccl.json")
    return paths


def launch_argv(inv, *, release: str, host_argv: Sequence[str], env_names: Sequence[str],
                image: str, secrets_file: str | None) -> list[str]:
    """What engine.json's argv becomes for kind container (the deploy's render step calls
    this with render.engine.engine_argv and the names of engine_environment)."""
    spec = inv.engine
    return run_argv(spec, ContainerRun(
        image=image, engine_argv=engine_command(spec, host_argv), env_names=env_names,
        npus=inv.cluster.npus_per_node,
        read_only_paths=read_only_paths(release=release, root=inv.deploy.root,
                                        model_source=inv.model.source is not None,
                                        model_path=inv.model.path),
        secrets_file=secrets_file))
