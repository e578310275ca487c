"""Which model an inventory serves, as the release matrix names models, and whether the
pinned vllm-ascend release claims it (its scope) and has a tutorial for it.

A model is identified by model.builtin_config, model.name (the Hugging Face id) and the
last component of model.path / model.source, lower-cased with `_` and spaces read as
`-`; a matrix name (`qwen3.5-397b-a17b`, `glm-5.3`) identifies the model when it is part
of one of them. model.served_name is an alias the operator picks and identifies nothing."""

from __future__ import annotations

import posixpath
import re
from typing import Any

from ascendctl.releases.sets import (
    ReleaseMatrix, ReleaseSet, TutorialFlags, load_matrix, parse_official_tag,
)

_SEPARATORS = re.compile(r"[\s_]+")


def normalise(name: str) -> str:
    return _SEPARATORS.sub("-", name.strip().lower())


def model_identity(model: Any) -> tuple[str, ...]:
    """The normalised names a ModelSpec goes by (see the module docstring)."""
    names = [model.builtin_config, model.name]
    for path in (model.path, model.source):
        if path:
            names.append(posixpath.basename(str(path).rstrip("/")))
    return tuple(dict.fromkeys(normalise(n) for n in names if n))


def identifies(fragment: str, identity: tuple[str, ...]) -> bool:
    wanted = normalise(fragment)
    return any(wanted in name for name in identity)


def model_label(model: Any) -> str:
    return model.name or model.builtin_config or posixpath.basename(
        str(model.path or model.source or "the model").rstrip("/"))


def product_line(chip: str) -> str:
    """The hardware name release notes use for the inventory's chip."""
    return "a3" if chip == "Ascend910_93" else "a2"


def pinned_release(inv: Any, matrix: ReleaseMatrix | None = None) -> ReleaseSet | None:
    """The release set the inventory targets: versions.vllm_ascend, else the tag of an
    official vllm-ascend image."""
    matrix = matrix or load_matrix()
    pin = inv.versions.vllm_ascend
    if not pin and inv.engine.image:     # an image is only valid where the kind runs one
        tag = parse_official_tag(inv.engine.image, matrix)
        pin = tag.vllm_ascend if tag else None
    return matrix.find(pin.lstrip("vV")) if pin else None


def tutorial_for(row: ReleaseSet | None, model: Any) -> TutorialFlags | None:
    """The flags ROW's tutorial for this model adds (None: no tutorial for it)."""
    if row is None:
        return None
    identity = model_identity(model)
    return next((flags for name, flags in row.tutorials.items()
                 if identifies(name, identity)), None)


def scope_warnings(inv: Any, matrix: ReleaseMatrix | None = None) -> list[str]:
    """Warnings when the inventory's model or hardware is outside what the pinned
    release claims; empty when it is inside, or no release is pinned."""
    row = pinned_release(inv, matrix)
    if row is None:
        return []
    scope = row.scope
    if scope.restricted is None:
        return [f"vllm-ascend {row.tag} published no release notes: nothing states which "
                f"models or hardware it validates"]
    if not scope.restricted:
        return []
    label, line = model_label(inv.model), product_line(inv.cluster.chip)
    note = f" ({scope.note})" if scope.note else ""
    identity = model_identity(inv.model)
    hit = next((m for m in scope.models if any(identifies(f, identity) for f in m.match)),
               None)
    if hit is None:
        return [f"model {label} is outside the scope of vllm-ascend {row.tag}, which "
                f"validates only {scope.describe()}{note}"]
    if line not in hit.hardware:
        return [f"vllm-ascend {row.tag} validates {hit.name} on {', '.join(hit.hardware)} "
                f"only, not {line} (cluster.chip {inv.cluster.chip}){note}"]
    return []
