"""vLLM's model-info cache, kept on the host across labs.

At every start, `vllm serve` inspects the model's class in a child Python that imports
vLLM and torch again (about 10 s on a 2-core machine), unless `$VLLM_CACHE_ROOT/modelinfos`
holds the answer for the hash of that model file (vllm/model_executor/models/registry.py,
`_LazyRegisteredModel.inspect_model_cls`; vLLM checks the hash and inspects again on a
mismatch). A node's cache dies with its lab, so every lab's first start on every node paid
it. The lab keeps the files next to the vLLM layer they were made by: `lab down` takes the
ones a node wrote, `lab up` puts them on every node it provisions.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

from ascendctl.fileio import write_atomic

# Where vLLM keeps it on a node: the engine runs as root with no VLLM_CACHE_ROOT, HOME or
# XDG_CACHE_HOME of its own (a container engine has its own file system and is not seeded).
NODE_DIR = Path("root/.cache/vllm/modelinfos")
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,200}\.json$")
_MAX_BYTES = 64 * 1024


def host_dir(layers: list[Path]) -> Path | None:
    """The cache of the image's vLLM layer (`images/vllm-<digest>/modelinfos`), or None for
    an image without one (`--no-vllm`)."""
    for layer in layers:
        if layer.name == "layer" and layer.parent.name.startswith("vllm-"):
            return layer.parent / "modelinfos"
    return None


def seed(upper: Path, layers: list[Path]) -> int:
    """Copy the host's cache into a node's upper layer (the node is not running); the
    number of files copied."""
    source = host_dir(layers)
    if source is None or not source.is_dir():
        return 0
    target = upper / NODE_DIR
    if not _inside(target, upper):
        return 0
    return _write_all(_entries(source), target)


def harvest(upper: Path, layers: list[Path]) -> int:
    """Keep on the host the cache files a stopped node wrote that the host lacks; the
    number kept. What a node wrote is checked as untrusted input: a regular file with a
    plain name, bounded, the JSON vLLM writes; a symlinked path is ignored."""
    target = host_dir(layers)
    source = upper / NODE_DIR
    if target is None or not source.is_dir() or not _inside(source, upper):
        return 0
    return _write_all({name: data for name, data in _entries(source).items()
                       if not (target / name).exists()}, target)


def _entries(directory: Path) -> dict[str, bytes]:
    """The valid cache files of DIRECTORY, by name, each read once."""
    found = {}
    for path in sorted(directory.iterdir()):
        if _NAME.match(path.name):
            data = _read_regular(path)
            if data is not None and _is_modelinfo(data):
                found[path.name] = data
    return found


def _read_regular(path: Path) -> bytes | None:
    """The bytes of PATH if it is a regular file (not a symlink) of at most _MAX_BYTES;
    opened once, so what is checked is what is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_BYTES:
            return None
        data = handle.read(_MAX_BYTES + 1)
    return data if len(data) <= _MAX_BYTES else None


def _is_modelinfo(data: bytes) -> bool:
    try:
        parsed = json.loads(data.decode("utf-8"))
    except ValueError:
        return False
    return (isinstance(parsed, dict) and isinstance(parsed.get("hash"), str)
            and isinstance(parsed.get("modelinfo"), dict))


def _inside(path: Path, root: Path) -> bool:
    """`path` resolves to where it says under `root` (no component of it is a symlink)."""
    return path.resolve() == root.resolve() / path.relative_to(root)


def _write_all(files: dict[str, bytes], directory: Path) -> int:
    written = 0
    for name, data in files.items():
        try:
            write_atomic(directory / name, data, 0o644)
        except OSError:
            continue
        written += 1
    return written
