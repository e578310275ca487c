"""`ascendctl lab engine-image`: the lab's vLLM CPU engine as a container image archive.

Written from the node image's own layers (no registry, no build tool): the base root
filesystem and the vLLM layer, plus a small layer with a simulated CANN toolkit (the
same files, in the same format, as the simulated nodes have), as a docker-archive that
`podman load` and `docker load` read. As in CANN's images, the toolkit's environment is
set by the ENTRYPOINT, which sources the toolkit's set_env.sh and AscendNPU-IR's (the
Bisheng compiler triton-ascend runs) and then execs its arguments; none of it is in ENV.
Layer tars are written once and shared by every tag; a tag only changes a label in the
image config, so tags have different image IDs and the same layers. Cached under
<lab root>/engine-images/.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ascendctl.engine.archive import LayerTar, image_config, write_docker_archive, write_layer_tar
from ascendctl.errors import InputError
from ascendctl_lab import paths
from ascendctl_lab.hostcmd import LabError
from ascendctl_lab.image import VLLM_DIR, VLLM_VERSION, Progress, _lock, engine_layers, ensure_image
from ascendctl_lab.sim import files as sim_files
from ascendctl_lab.sim import state as sim_state

REPOSITORY = "localhost/ascendctl-lab/vllm-cpu"
DEFAULT_TAG = "v1"
TAG_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
TAG_LABEL = "org.ascendctl.lab.tag"
WRITER_VERSION = "1"
ENGINE_COMMAND = "vllm"
# What the node image's vLLM layer holds that the engine never loads, left out of the
# image (a quarter of its 4 GB, relayed and loaded at every container deploy): Triton
# (its wheel has no CPU backend, so vLLM's CPU build disables it: "Triton is installed,
# but doesn't include CPU backend"), torch's tests and C++ headers. Names under each
# site-packages of the venv; globs.
ENGINE_LAYER_SKIP = ("triton", "triton-*.dist-info", "torch/test", "torch/include")
IMAGE_ENV = (f"PATH={VLLM_DIR}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
             "HOME=/root", "LANG=C.UTF-8")
# AscendNPU-IR's binaries (bishengir-compile, which triton-ascend looks up on PATH) are in
# the toolkit's tools/bishengir; its set_env.sh is under share/info/ascendnpu-ir/bin.
BISHENG_BIN = "${ASCEND_TOOLKIT_HOME}/tools/bishengir/bin"
BISHENG_SET_ENV = f"export PATH={BISHENG_BIN}:$PATH\n"


@dataclass(frozen=True)
class EngineImage:
    image: str
    archive: Path
    image_id: str
    bytes: int
    tag: str
    cann: str
    seconds: float
    built: bool

    def to_dict(self) -> dict:
        return {"image": self.image, "archive": str(self.archive), "image_id": self.image_id,
                "bytes": self.bytes, "tag": self.tag, "cann": self.cann,
                "engine_command": ENGINE_COMMAND, "seconds": round(self.seconds, 1),
                "built": self.built}


def cache_dir() -> Path:
    return paths.lab_root() / "engine-images"


def check_tag(tag: str) -> str:
    if not TAG_RE.fullmatch(tag):
        raise InputError("use letters, digits, '_', '.' or '-' (at most 128, no leading "
                         "'.' or '-')", field="--tag")
    return tag


def bisheng_set_env_path(toolkit: dict[str, str]) -> str:
    return f"{sim_files.TOOLKIT_ROOT}/{toolkit['version']}/share/info/ascendnpu-ir/bin/set_env.sh"


def entrypoint(toolkit: dict[str, str]) -> list[str]:
    """CANN's: source the set_env.sh files, then exec the container's command."""
    return ["/bin/bash", "-c",
            f"source {sim_files.TOOLKIT_ROOT}/set_env.sh && "
            f"source {bisheng_set_env_path(toolkit)} && exec \"$@\"", "--"]


def _toolkit_state(toolkit: dict[str, str], running: str) -> dict:
    """The simulated nodes' state with the toolkit only (the driver's files come from the
    node, mounted)."""
    return {"driver": {}, "firmware": {}, "install_info": False, "toolkit": toolkit,
            "toolkit_running": running}


def _image_only_files(toolkit: dict[str, str]) -> dict[str, str]:
    """Files CANN's images have and the simulated nodes do not: AscendNPU-IR's set_env.sh."""
    return {bisheng_set_env_path(toolkit): BISHENG_SET_ENV}


def cann_files(toolkit: dict[str, str], running: str) -> dict[str, str]:
    """The toolkit's files as the simulated nodes have them (sim/files.py), without the
    driver's, and the image's own (AscendNPU-IR's set_env.sh)."""
    files = {path: text for path, text in sim_files.render(_toolkit_state(toolkit, running)).items()
             if path.startswith(sim_files.TOOLKIT_ROOT)}
    return {**files, **_image_only_files(toolkit)}


def _cann_layer(out: Path, toolkit: dict[str, str], running: str) -> LayerTar:
    content = json.dumps({"files": cann_files(toolkit, running), "w": WRITER_VERSION},
                         sort_keys=True)
    name = "cann-" + hashlib.sha256(content.encode()).hexdigest()[:16]
    return _cached_layer(out, name, lambda tmp: _write_cann_tree(tmp, toolkit, running))


def _write_cann_tree(root: Path, toolkit: dict[str, str], running: str) -> None:
    sim_files.sync_files(_toolkit_state(toolkit, running), str(root))
    for leftover in ("usr/local/Ascend/driver", "usr/local/Ascend/firmware"):
        shutil.rmtree(root / leftover, ignore_errors=True)
    for name, text in _image_only_files(toolkit).items():
        target = root / name.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    # fixed times: the same files give the same layer on every machine
    for path in sorted(root.rglob("*"), reverse=True):
        os.utime(path, (0, 0), follow_symlinks=False)
    os.utime(root, (0, 0))


def _cached_layer(out: Path, name: str, fill, skip: tuple[str, ...] = ()) -> LayerTar:
    tar = out / "layers" / f"{name}.tar"
    meta = tar.with_suffix(".json")
    if tar.exists() and meta.exists():
        data = json.loads(meta.read_text())
        if data.get("w") == WRITER_VERSION and tar.stat().st_size == data["size"]:
            return LayerTar(tar, data["diff_id"], data["size"])
    if callable(fill):
        with tempfile.TemporaryDirectory(dir=out) as tmp:
            source = Path(tmp) / "root"
            source.mkdir()
            fill(source)
            layer = write_layer_tar(source, tar)
    else:
        layer = write_layer_tar(Path(fill), tar, skip=skip)
    meta.write_text(json.dumps({"diff_id": layer.diff_id, "size": layer.size,
                                "w": WRITER_VERSION}) + "\n")
    return layer


def _engine_skip(layer: Path) -> tuple[str, ...]:
    """What ENGINE_LAYER_SKIP names in every site-packages of the vLLM venv in LAYER."""
    lib = layer / VLLM_DIR.lstrip("/") / "lib"
    return tuple(str(path.relative_to(layer)) for site in sorted(lib.glob("python3*/site-packages"))
                 for pattern in ENGINE_LAYER_SKIP for path in sorted(site.glob(pattern)))


def build_engine_image(tag: str = DEFAULT_TAG, progress: Progress = print) -> EngineImage:
    """The archive for TAG (built once; later calls return the cached one)."""
    check_tag(tag)
    started = time.monotonic()
    image = ensure_image(progress, with_vllm=True)
    base, vllm = engine_layers(image)
    out = cache_dir()
    out.mkdir(parents=True, exist_ok=True)
    toolkit = dict(sim_state.DEFAULT_TOOLKIT)
    running = sim_state.DEFAULT_TOOLKIT_RUNNING
    with _lock(out / ".lock"):
        layers = []
        for directory, skip in ((base, ()), (vllm, _engine_skip(vllm))):
            # base-<hash>, vllm-<hash>: the recipe (and what the engine image leaves out)
            name = directory.parent.name + ("-engine" if skip else "")
            if not (out / "layers" / f"{name}.tar").exists():
                progress(f"writing layer {name} (once; a few GB take ~30 s)")
            layers.append(_cached_layer(out, name, directory, skip))
        layers.append(_cann_layer(out, toolkit, running))
        config = image_config(
            [layer.diff_id for layer in layers], env=IMAGE_ENV, cmd=["/bin/sh"],
            entrypoint=entrypoint(toolkit),
            labels={TAG_LABEL: tag, "org.opencontainers.image.version": VLLM_VERSION,
                    "org.opencontainers.image.title": "ascendctl lab vLLM CPU engine",
                    "org.ascendctl.lab.cann": toolkit["version"]})
        image_id = "sha256:" + hashlib.sha256(config).hexdigest()
        reference = f"{REPOSITORY}:{tag}"
        archive = out / f"vllm-cpu-{tag}-{image_id[7:19]}.tar"
        built = not archive.exists()
        if built:
            progress(f"writing the image archive {archive.name}")
            written = write_docker_archive(archive, layers, config, [reference])
            if written != image_id:
                raise LabError(f"archive writer produced {written}, expected {image_id}")
            for stale in out.glob(f"vllm-cpu-{tag}-*.tar"):
                if stale != archive:
                    stale.unlink()
    return EngineImage(reference, archive, image_id, archive.stat().st_size, tag,
                       toolkit["version"], time.monotonic() - started, built)
