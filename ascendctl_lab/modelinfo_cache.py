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
import shutil
from pathlib import Path

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
    target.mkdir(parents=True, exist_ok=True)
    return sum(_copy(path, target / path.name) for path in _entries(source))


def harvest(upper: Path, layers: list[Path]) -> int:
    """Keep on the host the cache files a stopped node wrote that the host lacks; the
    number kept. What a node wrote is checked as untrusted input: a regular file with a
    plain name, bounded, the JSON vLLM writes; a symlinked path is ignored."""
    target = host_dir(layers)
    source = upper / NODE_DIR
    if target is None or not source.is_dir() or not _inside(source, upper):
        return 0
    target.mkdir(parents=True, exist_ok=True)
    return sum(_copy(path, target / path.name) for path in _entries(source)
               if not (target / path.name).exists())


def _entries(directory: Path) -> list[Path]:
    found = []
    for path in sorted(directory.iterdir()):
        if not _NAME.match(path.name) or path.is_symlink() or not path.is_file():
            continue
        if path.stat().st_size > _MAX_BYTES or not _is_modelinfo(path):
            continue
        found.append(path)
    return found


def _is_modelinfo(path: Path) -> bool:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (isinstance(data, dict) and isinstance(data.get("hash"), str)
            and isinstance(data.get("modelinfo"), dict))


def _inside(path: Path, root: Path) -> bool:
    """`path` resolves to where it says under `root` (no component of it is a symlink)."""
    return path.resolve() == root.resolve() / path.relative_to(root)


def _copy(source: Path, dest: Path) -> bool:
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        shutil.copyfile(source, tmp, follow_symlinks=False)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    except OSError:
        tmp.unlink(missing_ok=True)
        return False
    return True
