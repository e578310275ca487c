"""What the inventory loader checks about the engine once every section is valid: the
`engine:` fields fit its kind, a container's mounts and options neither collide with the
run's own mounts nor weaken its isolation unacknowledged, `versions:` is one release set,
and an official vllm-ascend image fits the chip and the pinned release."""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping
from typing import Any

from ascendctl.engine.releases import (
    check_versions, chip_variants, load_matrix, parse_official_tag,
)
from ascendctl.inventory.container_safety import engine_problems

Path = tuple[Any, ...]
BASE: Path = ("all", "vars")


def check_engine_inventory(sections: Mapping[str, Any], fail: Callable[[str, Path], Exception],
                           written: Container[Path]) -> None:
    """Raise fail(message, yaml path) for the first problem. `written`: the YAML paths
    present in the file (to tell a default from a value someone wrote)."""
    engine = sections["engine"]
    for field, message in engine.coherence_problems():
        raise fail(message, BASE + ("engine", field))
    if engine.kind != "host" and BASE + ("serving", "engine") in written:
        raise fail(f"serving.engine is the executable on the host (engine.kind host); with "
                   f"engine.kind {engine.kind} the engine is engine.command (default vllm) "
                   f"{'inside the image' if engine.kind == 'container' else 'in the venv'}",
                   BASE + ("serving", "engine"))
    if engine.kind == "container" and any(ch in sections["deploy"].root for ch in ",:"):
        raise fail("with engine.kind container the deploy root is mounted into the "
                   "container: it must not contain ',' or ':'", BASE + ("deploy", "root"))
    for field, message in engine_problems(engine, deploy_root=sections["deploy"].root,
                                          model_path=sections["model"].path):
        raise fail(message, BASE + ("engine", *field))
    if engine.kind == "container" and sections["serving"].mode == "ray":
        raise fail("engine.kind container runs vllm serve in the container; serving.mode ray "
                   "(ray start on every node) is not supported in a container yet: use "
                   "mode dp or mp, or engine.kind venv/host", BASE + ("serving", "mode"))
    versions = sections["versions"]
    pins = {k: v for k, v in versions.model_dump().items() if v}
    check_versions(pins, lambda message, component: fail(
        message, BASE + ("versions", component)))
    if engine.kind == "container" and engine.image:
        _check_official_image(engine.image, sections["cluster"].chip, pins.get("vllm_ascend"),
                              fail)


def _check_official_image(image: str, chip: str, vllm_ascend: str | None,
                          fail: Callable[[str, Path], Exception]) -> None:
    from ascendctl.facts.versions import try_parse_version

    matrix = load_matrix()
    tag = parse_official_tag(image, matrix)
    if tag is None:
        return
    where = BASE + ("engine", "image")
    fits = chip_variants(chip)
    if tag.variant not in fits:
        raise fail(f"{image} is the {tag.variant} image; cluster.chip {chip} runs "
                   + " or ".join(f"{matrix.image_repository}:v{tag.vllm_ascend}"
                                 f"{matrix.image_variants[v]}" for v in fits), where)
    if vllm_ascend and try_parse_version(vllm_ascend) != try_parse_version(tag.vllm_ascend):
        raise fail(f"{image} is vllm-ascend {tag.vllm_ascend}, but versions.vllm_ascend "
                   f"pins {vllm_ascend}", where)
