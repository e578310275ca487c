"""The support bundle: one tar.gz with every node's logs and state, a manifest and the
findings. Secrets were redacted on the nodes; the controller redacts once more with the
key it can resolve itself and refuses to write a bundle that still contains it."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ascendctl.doctor.collect import NodeCollection
from ascendctl.doctor.scan import Finding
from ascendctl.errors import AscendctlError
from ascendctl.inventory import Inventory

REDACTED = "[REDACTED]"
BUNDLE_MODE = 0o640


def controller_secrets(inv: Inventory) -> list[str]:
    """The API key as this machine resolves it (if it can): never to appear in a bundle."""
    from ascendctl.errors import InputError
    from ascendctl.render.secrets import resolve_secrets

    try:
        return [v for v in resolve_secrets(inv).values() if v]
    except InputError:
        return []


def scrub(collections: Sequence[NodeCollection], secrets: Sequence[str]) -> None:
    """Redact again on the controller, with the node's own rules (secret-shaped values
    and key=value forms, whatever the value) plus the values the controller knows."""
    from ascendctl_runtime.doctor_node import redact

    for collection in collections:
        for path, text in collection.files.items():
            collection.files[path] = redact(text, sorted(secrets, key=len, reverse=True))


def manifest(inv: Inventory, collections: Sequence[NodeCollection], findings: Sequence[Finding],
             *, since_s: int, root_name: str) -> dict[str, Any]:
    from ascendctl import __version__

    nodes = []
    for c in collections:
        files = [{"path": f"{c.node}/{path}", "bytes": len(text.encode()),
                  "sha256": hashlib.sha256(text.encode()).hexdigest(),
                  **({"command": c.commands[path]["argv"], "exit": c.commands[path]["rc"]}
                     if path in c.commands else {})}
                 for path, text in sorted(c.files.items())]
        nodes.append({"name": c.node, "address": c.address, "rank": c.rank, "status": c.status,
                      "error": c.error, "hostname": c.hostname,
                      "collected_at": c.collected_at, "seconds": c.seconds,
                      "notes": c.notes, "files": files})
    return {
        "kind": "ascendctl-doctor-bundle",
        "version": 1,
        "ascendctl": __version__,
        "cluster": inv.cluster.name,
        "inventory": str(inv.path),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "since_s": since_s,
        "root": root_name,
        "secrets": "never collected (secrets.env is not read into the bundle); API key "
                   "values and key-shaped arguments are replaced by [REDACTED]",
        "nodes": nodes,
        "findings": [f.id + "@" + f.node for f in findings],
    }


def _add(tar: tarfile.TarFile, name: str, data: bytes, mtime: float) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(mtime)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def write_bundle(path: Path, inv: Inventory, collections: Sequence[NodeCollection],
                 findings: Sequence[Finding], *, since_s: int) -> dict[str, Any]:
    """Write the tar.gz atomically; returns its manifest."""
    secrets = controller_secrets(inv)
    scrub(collections, secrets)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    root = f"ascendctl-doctor-{inv.cluster.name}-{stamp}"
    data = manifest(inv, collections, findings, since_s=since_s, root_name=root)
    now = time.time()
    members: list[tuple[str, bytes]] = [
        (f"{root}/manifest.json", (json.dumps(data, indent=1) + "\n").encode()),
        (f"{root}/findings.json",
         (json.dumps([f.as_dict() for f in findings], indent=1) + "\n").encode()),
    ]
    for c in collections:
        if not c.ok:
            members.append((f"{root}/{c.node}/NOT-COLLECTED.txt",
                            f"{c.node} ({c.address}): {c.status}: {c.error}\n".encode()))
        for rel, text in sorted(c.files.items()):
            members.append((f"{root}/{c.node}/{rel}", text.encode()))
    from ascendctl_runtime.doctor_node import encodings

    leaked = [name for name, blob in members for value in secrets
              for form in encodings(value) if form.encode() in blob]
    if leaked:  # belt and braces: scrub() ran, so this is a bug, never a bundle with a key
        raise AscendctlError(f"refusing to write the bundle: a secret is still in {leaked[0]}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            with tarfile.open(fileobj=handle, mode="w:gz") as tar:
                for name, blob in members:
                    _add(tar, name, blob, now)
        os.chmod(tmp, BUNDLE_MODE)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return data
