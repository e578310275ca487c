"""Node side of the serving engine: the container runtime and its images, the processes
and containers holding the NPUs, and offline venvs built from a wheelhouse.

Standard library only; shipped with each call (ascendctl/transport/nodecall.py), with the
facts parsers it imports (the CANN version files are the preflight's). Each
operation runs fixed argv lists (no shell) and answers one JSON object. Raw tool output
is returned as it is: the controller parses it (ascendctl/engine/formats.py), so the
parsers are tested on recorded output. Layout under ROOT (deploy.root):

    store/sha256/<ab>/<sha>        objects pushed by the weights relay (archives, wheels)
    engines/images.json            images ascendctl loaded (only these are ever pruned)
    engines/venv/<digest>/         a venv built from a wheelhouse; .complete when done
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from typing import Any, Optional

from ascendctl.facts.engine import CANN_FILES, READ_FILES_SCRIPT
from ascendctl_runtime.nodeutil import answer_call, tail_file, write_atomic

DEVICE_PREFIX = "/dev/davinci"
NPU_DEVICES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
COMPLETE = ".complete"


def _run(argv: list[str], timeout: float = 120, stdin: Optional[bytes] = None
         ) -> dict[str, Any]:
    try:
        proc = subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout)
    except FileNotFoundError:
        return {"rc": 127, "stdout": "", "stderr": f"{argv[0]}: not found"}
    except subprocess.TimeoutExpired:
        return {"rc": 124, "stdout": "", "stderr": f"{argv[0]}: timed out after {timeout:g} s"}
    return {"rc": proc.returncode, "stdout": proc.stdout.decode("utf-8", "replace"),
            "stderr": proc.stderr.decode("utf-8", "replace")[-4000:]}


def _check_ref(value: str, what: str) -> str:
    if not isinstance(value, str) or not value or value.startswith("-") or \
            any(ord(ch) < 33 or ord(ch) == 127 for ch in value):
        raise ValueError(f"bad {what}: {value!r}")
    return value


def _check_sha(sha: str) -> str:
    if len(sha) != 64 or any(ch not in "0123456789abcdef" for ch in sha):
        raise ValueError(f"bad sha256 {sha!r}")
    return sha


def store_object(root: str, sha: str) -> str:
    return os.path.join(root, "store", "sha256", _check_sha(sha)[:2], sha)


# -- the runtime and its images --------------------------------------------------------

def runtime_version(runtime: str, path: str) -> dict[str, Any]:
    """`podman version --format json` / `docker version --format '{{json .}}'`."""
    fmt = "json" if runtime == "podman" else "{{json .}}"
    result = _run([_check_ref(path, "runtime path"), "version", "--format", fmt], timeout=30)
    result["path_exists"] = os.access(path, os.X_OK)
    return result


def image_id(runtime: str, path: str, image: str) -> dict[str, Any]:
    """`inspect --format {{.Id}}` of IMAGE (rc 125 / 1 when absent)."""
    return _run([path, "image", "inspect", "--format", "{{.Id}}",
                 _check_ref(image, "image")], timeout=60)


def _images_registry(root: str) -> str:
    return os.path.join(root, "engines", "images.json")


def _read_registry(root: str) -> dict[str, Any]:
    try:
        with open(_images_registry(root)) as handle:
            data = json.load(handle)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _record_image(root: str, image: str, ref: str) -> None:
    registry = _read_registry(root)
    entry = registry.setdefault(image, {"refs": [], "loaded": time.time()})
    if ref not in entry["refs"]:
        entry["refs"].append(ref)
    write_atomic(_images_registry(root), (json.dumps(registry, indent=1) + "\n").encode())


def held_layers(runtime: str, path: str, diff_ids: list[str]) -> dict[str, Any]:
    """Which of DIFF_IDS (uncompressed layer digests) the images in the runtime's storage
    already have: the storage keeps each layer once, whatever image brought it."""
    wanted = [_check_digest(d) for d in diff_ids]
    listed = _run([path, "images", "--quiet", "--no-trunc"], timeout=60)
    ids = sorted({line.strip() for line in listed["stdout"].splitlines() if line.strip()})
    held: set[str] = set()
    if listed["rc"] == 0 and ids:
        inspected = _run([path, "image", "inspect", "--format", "{{json .RootFS.Layers}}",
                          "--", *[_check_ref(i, "image id") for i in ids]], timeout=120)
        for line in inspected["stdout"].splitlines():
            try:
                layers = json.loads(line)
            except ValueError:
                continue
            if isinstance(layers, list):
                held.update(str(layer) for layer in layers)
    return {"rc": listed["rc"], "held": [d for d in wanted if d in held],
            "stderr": listed["stderr"][-300:]}


def image_state(runtime: str, path: str, image: str, diff_ids: list[str]) -> dict[str, Any]:
    """IMAGE's ID (image_id) and which of DIFF_IDS the storage holds, in one call."""
    return {**image_id(runtime, path, image), "held": held_layers(runtime, path,
                                                                   diff_ids)["held"]}


OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"


def layout_members(config: bytes, layers: list[list[Any]]) -> dict[str, bytes]:
    """The members of an OCI image archive holding the image config and a manifest that
    names LAYERS ([diff_id, size], uncompressed: the digest is the diff_id) without their
    blobs. podman loads it when its storage already holds every layer: the copy reuses a
    layer it has before it would read the blob. The config's digest is the image ID."""
    entries = []
    for item in layers:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[1], int)
                and not isinstance(item[1], bool) and item[1] >= 0):
            raise ValueError(f"bad layer entry {item!r}")
        entries.append({"mediaType": OCI_LAYER, "digest": _check_digest(item[0]),
                        "size": item[1]})
    members: dict[str, bytes] = {}

    def blob(data: bytes) -> dict[str, Any]:
        digest = hashlib.sha256(data).hexdigest()
        members[f"blobs/sha256/{digest}"] = data
        return {"digest": "sha256:" + digest, "size": len(data)}

    manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                           "config": {"mediaType": OCI_CONFIG, **blob(config)},
                           "layers": entries}, sort_keys=True).encode()
    index = {"schemaVersion": 2, "manifests": [{"mediaType": OCI_MANIFEST, **blob(manifest)}]}
    members["index.json"] = json.dumps(index).encode()
    members["oci-layout"] = json.dumps({"imageLayoutVersion": "1.0.0"}).encode()
    return members


def _check_digest(value: Any) -> str:
    if not isinstance(value, str) or not value.startswith("sha256:"):
        raise ValueError(f"bad digest {value!r}")
    _check_sha(value[7:])
    return value


def _load_layout(path: str, root: str, expected: str, layout: dict[str, Any]
                 ) -> dict[str, Any]:
    """`podman load` of the image's config alone (layout_members), as an OCI archive (an
    OCI directory would be named after its path) in the store, removed afterwards."""
    config = base64.b64decode(str(layout["config"]), validate=True)
    if "sha256:" + hashlib.sha256(config).hexdigest() != expected:
        return {"rc": 1, "stdout": "", "stderr": "the config is not the expected image"}
    staging = os.path.join(root, "store")
    os.makedirs(staging, exist_ok=True)
    handle, archive = tempfile.mkstemp(prefix=".layout-", suffix=".tar", dir=staging)
    try:
        with os.fdopen(handle, "wb") as raw, tarfile.open(fileobj=raw, mode="w") as tar:
            for directory in ("blobs", "blobs/sha256"):
                info = tarfile.TarInfo(directory)
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            for name, data in sorted(layout_members(config, list(layout["layers"])).items()):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        started = time.monotonic()
        loaded = _run([path, "load", "--input", archive], timeout=600)
        loaded["seconds"] = round(time.monotonic() - started, 1)
        return loaded
    finally:
        os.unlink(archive)


def load_archive(runtime: str, path: str, root: str, sha256: str, expected_id: str,
                 image: str, drop_archive: bool = True,
                 layout: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """Load the archive object SHA256 from the store; check it gave EXPECTED_ID; make sure
    IMAGE names it. Nothing is loaded when the image is already there. `drop_archive`:
    remove the store object once its image is loaded (the runtime's storage holds the
    image; a later deploy finds the image ID and sends nothing). `layout` (podman: the
    image's config and its layers' digests and sizes): with no archive in the store and
    every layer already held, the image is loaded from its config alone."""
    expected = _normal_id(expected_id)
    present = image_id(runtime, path, expected)
    steps: list[dict[str, Any]] = []
    from_config = False
    if present["rc"] != 0:
        archive = store_object(root, sha256)
        if os.path.isfile(archive):
            started = time.monotonic()
            loaded = _run([path, "load", "--input", archive], timeout=3600)
            loaded["seconds"] = round(time.monotonic() - started, 1)
        elif layout and runtime == "podman" and _holds_every_layer(runtime, path, layout):
            loaded = _load_layout(path, root, expected, layout)
            from_config = True
        else:
            return {"ok": False, "reason": f"archive {sha256[:12]} is not in the store",
                    "steps": steps}
        steps.append({"load": loaded})
        if loaded["rc"] != 0:
            return {"ok": False, "reason": "load failed", "steps": steps}
        present = image_id(runtime, path, expected)
        if present["rc"] != 0:
            return {"ok": False, "reason": f"the archive did not hold image {expected}",
                    "steps": steps}
    named = image_id(runtime, path, image)
    if named["rc"] != 0 or _normal_id(named["stdout"]) != expected:
        tagged = _run([path, "tag", expected.removeprefix("sha256:"), _check_ref(image, "image")],
                      timeout=60)
        steps.append({"tag": tagged})
        if tagged["rc"] != 0:
            return {"ok": False, "reason": f"cannot tag {expected[:19]} as {image}",
                    "steps": steps}
    _record_image(root, expected, image)
    if drop_archive:
        for leftover in (store_object(root, sha256), store_object(root, sha256) + ".meta"):
            try:
                os.unlink(leftover)
            except FileNotFoundError:
                pass
    return {"ok": True, "image_id": expected, "loaded": bool(steps and "load" in steps[0]),
            "from_config": from_config, "steps": steps}


def _holds_every_layer(runtime: str, path: str, layout: dict[str, Any]) -> bool:
    wanted = [item[0] for item in layout["layers"]]
    return len(held_layers(runtime, path, wanted)["held"]) == len(wanted)


def _normal_id(text: str) -> str:
    value = text.strip().lower().removeprefix("sha256:")
    return "sha256:" + value


def image_files(runtime: str, path: str, image: str, files: Optional[list[str]] = None
                ) -> dict[str, Any]:
    """The CANN version files inside IMAGE, read by a throw-away container (no network,
    nothing mounted): `==> path <==` then the content, per file found. The image's
    entrypoint is bypassed: reading files needs none of its environment, and one that
    fails (a set_env.sh it sources is missing) must not hide them."""
    patterns = [str(p) for p in (files or CANN_FILES)]
    for pattern in patterns:
        if not pattern.startswith("/") or any(ch.isspace() for ch in pattern):
            raise ValueError(f"bad path {pattern!r}")
    return _run([path, "run", "--rm", "--pull=never", "--network=none",
                 "--entrypoint=/bin/sh", _check_ref(image, "image"), "-c", READ_FILES_SCRIPT,
                 "sh", *patterns], timeout=120)


def containers(runtime: str, path: str) -> dict[str, Any]:
    """Running containers with their devices: `ps` IDs, then one `inspect` of them all."""
    listed = _run([path, "ps", "--no-trunc", "--quiet"], timeout=60)
    if listed["rc"] != 0:
        return {"ps": listed, "inspect": None}
    ids = [line.strip() for line in listed["stdout"].splitlines() if line.strip()]
    if not ids:
        return {"ps": listed, "inspect": {"rc": 0, "stdout": "[]", "stderr": ""}}
    return {"ps": listed, "inspect": _run([path, "inspect", "--type", "container", *ids],
                                          timeout=60)}


def device_holders() -> dict[str, Any]:
    """Processes with an NPU device open (/proc/*/fd), with their systemd unit."""
    holders = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fd_dir = f"/proc/{entry}/fd"
        devices = set()
        try:
            for fd in os.listdir(fd_dir):
                try:
                    target = os.readlink(f"{fd_dir}/{fd}")
                except OSError:
                    continue
                if target.startswith(DEVICE_PREFIX) or target in NPU_DEVICES:
                    devices.add(target)
        except OSError:
            continue
        if not devices:
            continue
        holders.append({"pid": int(entry), "comm": _read(f"/proc/{entry}/comm").strip(),
                        "cgroup": _read(f"/proc/{entry}/cgroup"),
                        "devices": sorted(devices)})
    return {"holders": holders}


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def npu_holders(runtime: Optional[str], path: Optional[str]) -> dict[str, Any]:
    answer = device_holders()
    if runtime and path and os.access(path, os.X_OK):
        answer["containers"] = containers(runtime, path)
    return answer


# -- venvs -----------------------------------------------------------------------------

def _venv_dir(root: str, digest: str) -> str:
    return os.path.join(root, "engines", "venv", _check_sha(digest))


def venv_state(root: str, digest: str) -> dict[str, Any]:
    directory = _venv_dir(root, digest)
    marker = os.path.join(directory, COMPLETE)
    try:
        with open(marker) as handle:
            info = json.load(handle)
    except (OSError, ValueError):
        return {"present": False, "path": directory}
    return {"present": True, "path": directory, **info}


def venv_create(root: str, digest: str, python: str, wheels: list[dict[str, str]],
                packages: Optional[list[str]] = None) -> dict[str, Any]:
    """Build the venv DIGEST from wheels in the store, offline: `pip install --no-index`
    from a directory of links to the store objects; every wheel (`--no-deps`: the
    wheelhouse is the lock) or the named packages with their dependencies from it."""
    state = venv_state(root, digest)
    if state["present"]:
        return {"created": False, **state}
    directory = state["path"]
    os.makedirs(os.path.dirname(directory), exist_ok=True)
    lock = open(directory + ".lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = venv_state(root, digest)
        if state["present"]:
            return {"created": False, **state}
        return _build_venv(root, directory, digest, python, wheels, packages or [])
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()


def _build_venv(root: str, directory: str, digest: str, python: str,
                wheels: list[dict[str, str]], packages: list[str]) -> dict[str, Any]:
    started = time.monotonic()
    links = tempfile.mkdtemp(prefix=".wheelhouse-", dir=os.path.dirname(directory))
    log_path = directory + ".log"
    try:
        missing = []
        for wheel in wheels:
            name = os.path.basename(str(wheel["name"]))
            if not name.endswith(".whl") or name != wheel["name"]:
                raise ValueError(f"bad wheel name {wheel['name']!r}")
            target = store_object(root, wheel["sha256"])
            if not os.path.isfile(target):
                missing.append(name)
                continue
            os.symlink(target, os.path.join(links, name))
        if missing:
            return {"created": False, "present": False, "failure":
                    f"not in the store: {', '.join(missing[:5])}"}
        shutil.rmtree(directory, ignore_errors=True)
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "HOME": "/root", "LANG": "C.UTF-8", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
               "PIP_NO_INPUT": "1", "PIP_CONFIG_FILE": os.devnull}
        pip = os.path.join(directory, "bin", "pip")
        if packages:
            targets = ["--find-links", links, *[_check_ref(p, "package") for p in packages]]
        else:
            targets = ["--no-deps", *sorted(os.path.join(links, w["name"]) for w in wheels)]
        # --no-compile: pip would byte-compile every module of every wheel (transformers'
        # hundreds of models, torch's tests), twice the time of the install itself; the
        # engine's first start compiles only the modules it imports.
        steps = ([_check_ref(python, "python"), "-m", "venv", directory],
                 [pip, "install", "--no-index", "--no-cache-dir", "--no-compile",
                  "--progress-bar", "off", *targets])
        with open(log_path, "wb") as log:
            for argv in steps:
                log.write(("$ " + " ".join(argv[:8]) + (" ..." if len(argv) > 8 else "")
                           + "\n").encode())
                log.flush()
                rc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                    timeout=3600).returncode
                if rc != 0:
                    shutil.rmtree(directory, ignore_errors=True)
                    return {"created": False, "present": False,
                            "failure": f"{os.path.basename(argv[0])} exited {rc}",
                            "log": tail_file(log_path, 15, 8192)}
        check = _run([pip, "check"], timeout=300)
        version = _run([os.path.join(directory, "bin", "python"), "-c",
                        "import sys; print('%d.%d.%d' % sys.version_info[:3])"], timeout=60)
        info = {"digest": digest, "python": version["stdout"].strip(),
                "wheels": len(wheels), "pip_check": (check["stdout"] + check["stderr"])[-2000:],
                "pip_check_ok": check["rc"] == 0, "built": time.time(),
                "seconds": round(time.monotonic() - started, 1)}
        write_atomic(os.path.join(directory, COMPLETE), (json.dumps(info) + "\n").encode())
        return {"created": True, "present": True, "path": directory, **info}
    finally:
        shutil.rmtree(links, ignore_errors=True)


# -- pruning ---------------------------------------------------------------------------

def prune(root: str, keep_images: list[str], keep_venvs: list[str],
          runtime: Optional[str] = None, path: Optional[str] = None,
          check: bool = False) -> dict[str, Any]:
    """Remove images ascendctl loaded and venvs it built that no kept release uses.
    Images the site put there itself are never touched."""
    keep_i = {_normal_id(i) for i in keep_images}
    keep_v = set(keep_venvs)
    removed_images, failed, removed_venvs = [], [], []
    registry = _read_registry(root)
    for image in sorted(registry):
        if image in keep_i:
            continue
        if check:
            removed_images.append(image)
            continue
        if not (runtime and path):
            failed.append({"image": image, "error": "no runtime given"})
            continue
        result = _run([path, "rmi", image.removeprefix("sha256:")], timeout=300)
        gone = image_id(runtime, path, image)["rc"] != 0
        if gone:
            removed_images.append(image)
            registry.pop(image, None)
        else:
            failed.append({"image": image, "error": result["stderr"].strip()[-300:]})
    if not check:
        write_atomic(_images_registry(root), (json.dumps(registry, indent=1) + "\n").encode())
    venv_root = os.path.join(root, "engines", "venv")
    for entry in sorted(os.listdir(venv_root)) if os.path.isdir(venv_root) else []:
        full = os.path.join(venv_root, entry)
        if entry in keep_v or not os.path.isdir(full) or len(entry) != 64:
            continue
        removed_venvs.append(entry)
        if not check:
            shutil.rmtree(full, ignore_errors=True)
            for extra in (full + ".log", full + ".lock"):
                if os.path.exists(extra):
                    os.unlink(extra)
    return {"images": removed_images, "venvs": removed_venvs, "failed": failed,
            "check": check}


OPERATIONS = {
    "runtime_version": runtime_version, "image_id": image_id, "load_archive": load_archive,
    "image_state": image_state,
    "image_files": image_files, "npu_holders": npu_holders, "venv_state": venv_state,
    "venv_create": venv_create, "prune": prune,
}


def run_call(payload: bytes) -> int:
    return answer_call(payload, OPERATIONS)


if __name__ == "__main__":
    sys.exit(run_call(sys.stdin.buffer.read()))
