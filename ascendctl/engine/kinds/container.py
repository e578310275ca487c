"""`kind: container`: an image (`image:`, run with `runtime:` docker or podman), moved as a
`save` archive from the jump host when `archive:` is given, else already on every node.

The image carries the CANN toolkit and the Python stack, so the host's are not judged;
the release runs the image by ID (its identity) in ascendctl-engine-container.service.
"""

from __future__ import annotations

import base64
from collections.abc import Container, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ascendctl.engine import container_run
from ascendctl.engine.archive_files import cached_archive_files
from ascendctl.engine.identity import (
    ArchiveImage, EngineError, EngineIdentity, normalise_image_id, read_archive,
)
from ascendctl.engine.kinds.base import (
    BASE, EngineKind, EnginePlan, Fail, Launch, NodeEngine, NodeObjects, Path, map_nodes,
    node_ops, refuse_serving_engine,
)
from ascendctl.releases.sets import chip_variants, load_matrix, parse_official_tag
from ascendctl.errors import AscendctlError, InputError
from ascendctl.facts.engine import CANN_FILES, image_cann_from_files
from ascendctl.facts.versions import try_parse_version
from ascendctl.inventory.container_safety import engine_problems
from ascendctl.inventory.engine import EngineSpec
from ascendctl.inventory.excerpt import excerpt
from ascendctl.weights.files_push import hashed_files

if TYPE_CHECKING:
    from ascendctl.engine.nodeops import EngineNodeOps

FIELDS = ("runtime", "runtime_path", "image", "archive", "mounts", "options", "ipc",
          "shm_size", "allow_unsafe")
UNIT_TEMPLATE = "systemd/ascendctl-engine-container.service.j2"


def image_identity(image_id: str, image: str | None = None) -> EngineIdentity:
    return EngineIdentity("container", image_id, "img-" + image_id.removeprefix("sha256:")[:12],
                          {"image": image} if image else {})


def archive_identity(archive: str, image: str) -> tuple[EngineIdentity, ArchiveImage]:
    held = read_archive(archive)
    identity = image_identity(held.image_id, image)
    return EngineIdentity(identity.kind, identity.id, identity.short,
                          {"image": image, "archive": str(held.path)}), held


def identity_from_nodes(image: str, image_ids: Mapping[str, str | None]) -> EngineIdentity:
    """The image every node holds under IMAGE (no archive to read it from). Refuses,
    naming the nodes, when some lack it or hold different images."""
    missing = sorted(node for node, value in image_ids.items() if not value)
    if missing:
        raise EngineError(f"image {image} is not on {', '.join(missing)} and the inventory "
                          "gives no engine.archive to load it from")
    ids: dict[str, list[str]] = {}
    for node, value in image_ids.items():
        ids.setdefault(normalise_image_id(str(value)), []).append(node)
    if len(ids) > 1:
        listing = "; ".join(f"{i[7:19]} on {', '.join(sorted(n))}" for i, n in sorted(ids.items()))
        raise EngineError(f"image {image} differs between nodes: {listing}")
    (image_id,) = ids
    return image_identity(image_id, image)


class ContainerKind(EngineKind):
    name = "container"
    fields = FIELDS
    relayed = "image archive"
    stack_from = "image"          # what carries the CANN toolkit and the Python stack

    # -- validate ------------------------------------------------------------------------

    def section_problems(self, spec: EngineSpec) -> list[tuple[Path, str]]:
        problems: list[tuple[Path, str]] = []
        if spec.runtime is None:
            problems.append((("runtime",), "kind: container needs runtime: docker or podman"))
        if spec.image is None:
            problems.append((("image",), "kind: container needs image: (the reference the "
                                         "nodes run; with archive: the one it holds)"))
        if spec.shm_size is not None and spec.ipc == "host":
            problems.append((("shm_size",), "applies only with ipc: private (with host IPC "
                                            "the container uses the node's /dev/shm)"))
        seen: set[str] = set()
        for mount in spec.mounts:
            if mount.target in seen:
                problems.append((("mounts",), f"target {excerpt(mount.target)} is mounted "
                                              "twice"))
                break
            seen.add(mount.target)
        return problems

    def check_inventory(self, sections: Mapping[str, Any], fail: Fail,
                        written: Container[Path]) -> None:
        refuse_serving_engine(sections, fail, written, self.name, "inside the image")
        root = sections["deploy"].root
        if any(ch in root for ch in ",:"):
            raise fail("with engine.kind container the deploy root is mounted into the "
                       "container: it must not contain ',' or ':'", BASE + ("deploy", "root"))
        reserved = container_run.reserved_targets(root=root, model_path=sections["model"].path)
        for field, message in engine_problems(sections["engine"], deploy_root=root,
                                              reserved=reserved):
            raise fail(message, BASE + ("engine", *field))
        if sections["serving"].mode == "ray":
            raise fail("engine.kind container runs vllm serve in the container; serving.mode "
                       "ray (ray start on every node) is not supported in a container yet: use "
                       "mode dp or mp, or engine.kind venv/host", BASE + ("serving", "mode"))

    def check_against_pins(self, sections: Mapping[str, Any], pins: Mapping[str, str],
                           fail: Fail) -> None:
        """An official vllm-ascend image must fit the chip and the pinned release."""
        image, chip, vllm_ascend = sections["engine"].image, sections["cluster"].chip, \
            pins.get("vllm_ascend")
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

    # -- identity ------------------------------------------------------------------------

    def identity(self, inv, *, node_image_ids=None, cache=None) -> EngineIdentity:
        spec = inv.engine
        if spec.archive:
            return archive_identity(spec.archive, spec.image)[0]
        if node_image_ids is None:
            raise InputError("engine.archive is not set: the image ID is read from the nodes "
                             "at deploy time", file=str(inv.path), field="engine.archive")
        return identity_from_nodes(spec.image, node_image_ids)

    def preview_identity(self, inv) -> EngineIdentity:
        """Without an archive, the image reference as it is (a deploy asks the nodes)."""
        spec = inv.engine
        if spec.archive:
            return archive_identity(spec.archive, spec.image or "")[0]
        return image_identity(spec.image or "", spec.image or "")

    def identity_needs_nodes(self, spec: EngineSpec) -> bool:
        return not spec.archive

    def recorded(self, record: Mapping[str, Any]) -> EngineIdentity | None:
        if not record.get("id"):
            return None
        return image_identity(str(record["id"]), str(record.get("image") or "") or None)

    def summary(self, inv, identity: EngineIdentity) -> dict[str, Any]:
        spec = inv.engine
        return {**super().summary(inv, identity), "image": spec.image,
                "runtime": spec.runtime, "runtime_path": spec.runtime_executable}

    def label(self, identity: EngineIdentity) -> str:
        return f"{identity.detail.get('image') or 'image'} ({identity.short})"

    def describe(self, identity: EngineIdentity) -> str:
        return f"image {identity.detail.get('image') or ''} ({identity.short})"

    # -- present / prune -----------------------------------------------------------------

    def plan(self, inv, pool=None, *, cache=None, hosts: Sequence[Any]) -> EnginePlan:
        spec = inv.engine
        if spec.archive:
            identity, held = archive_identity(spec.archive, spec.image)
            return EnginePlan(identity, hashed_files([held.path], cache=cache),
                              without_objects=_config_layout(spec, held))
        if pool is None:
            raise ValueError("a container engine without an archive needs a pool")
        ids = map_nodes(pool, hosts, lambda conn: node_ops(inv, pool, conn.settings.name)
                        .image_id(spec.image))
        return EnginePlan(identity_from_nodes(spec.image, ids), node_images=ids)

    def status(self, inv, pool, plan: EnginePlan, *, hosts: Sequence[Any]
               ) -> dict[str, NodeEngine]:
        spec, identity = inv.engine, plan.identity
        label = self.label(identity)
        if not spec.archive:
            identity_from_nodes(spec.image, plan.node_images or {h.name: None for h in hosts})
            return {h.name: NodeEngine(h.name, False, f"{label} present") for h in hosts}
        objects = sum(f.entry.size for f in plan.objects)
        layout = plan.without_objects
        diff_ids = [digest for digest, _size in layout["layers"]] if layout else []

        def read(conn) -> NodeEngine:
            name = conn.settings.name
            ops = node_ops(inv, pool, name)
            if layout:
                present, held = ops.image_state(identity.id, diff_ids)
            else:
                present, held = ops.image_id(identity.id), set()
            if present == identity.id:
                return NodeEngine(name, False, f"{label} present")
            if layout and held == set(diff_ids):
                return NodeEngine(name, True, f"would load {label} from its config (every "
                                              "layer is on the node: nothing relayed)",
                                  relay=False)
            return NodeEngine(name, True, f"would relay the archive ({objects} bytes) and "
                                          f"load {label}")
        return map_nodes(pool, hosts, read)

    def install(self, inv, pool, plan: EnginePlan, *, need: Sequence[Any]
                ) -> dict[str, NodeEngine]:
        archive, identity, label = plan.objects[0].entry, plan.identity, \
            self.label(plan.identity)

        def load(conn) -> NodeEngine:
            name = conn.settings.name
            result = node_ops(inv, pool, name).load_archive(
                sha256=archive.sha256, expected_id=identity.id, image=inv.engine.image,
                layout=plan.without_objects)
            if not result.ok:
                raise EngineError(f"{name}: {result.reason}")
            if result.from_config:
                return NodeEngine(name, True, f"loaded {label} from its config in "
                                              f"{result.seconds or 0:.0f} s (every layer was "
                                              "on the node: nothing relayed)", relay=False)
            return NodeEngine(name, result.loaded,
                              f"relayed and loaded {label} in {result.seconds or 0:.0f} s"
                              if result.loaded else f"{label} present")
        return map_nodes(pool, need, load)

    def is_present(self, ops: EngineNodeOps, identity: EngineIdentity) -> bool:
        return ops.image_id(identity.id) == identity.id

    def recorded_spec(self, record: Mapping[str, Any], current: EngineSpec) -> EngineSpec:
        return EngineSpec(kind=self.name, runtime=record.get("runtime") or current.runtime
                          or "podman", runtime_path=record.get("runtime_path"),
                          image=record.get("image") or None)

    def node_objects(self, identity: EngineIdentity) -> NodeObjects:
        return NodeObjects(images=(identity.id,))

    # -- launch --------------------------------------------------------------------------

    def launch(self, inv, *, release: str, argv: list[str], env_names: Sequence[str],
               identity: EngineIdentity, secrets_file: str | None) -> Launch:
        spec = inv.engine
        run = container_run.launch_argv(inv, release=release, host_argv=argv,
                                        env_names=env_names, image=identity.id,
                                        secrets_file=secrets_file)
        return Launch(run, UNIT_TEMPLATE, {
            "runtime_name": spec.runtime,
            "image_short": identity.id.removeprefix("sha256:")[:12],
            "stop_argv": container_run.stop_argv(spec),
            "remove_argv": container_run.remove_argv(spec)})

    # -- preflight -----------------------------------------------------------------------

    def gather_params(self, inv) -> dict[str, Any]:
        """The runtime and the images to look for (the archive's image ID first: what
        the release runs)."""
        spec = inv.engine
        images = tuple(i for i in (_archive_id(spec.archive), spec.image) if i)
        return {"engine_runtime": spec.runtime, "engine_runtime_path": spec.runtime_executable,
                "engine_images": images}

    def expectation(self, inv) -> dict[str, Any]:
        """The archive's image ID and the CANN version files inside it (read on this
        machine, cached by path, size and mtime); a problem with them is the checks' to
        report."""
        spec = inv.engine
        fields: dict[str, Any] = {
            "runtime": spec.runtime, "image": spec.image, "archive": spec.archive,
            "unsafe": inv.unsafe_engine_options, "stack_from": self.stack_from,
            "own_container": container_run.CONTAINER_NAME}
        if not spec.archive:
            return fields
        try:
            image_id = read_archive(spec.archive).image_id
            files = cached_archive_files(spec.archive, CANN_FILES)
        except (AscendctlError, OSError, ValueError, KeyError) as err:
            return {**fields, "archive_error": str(err)}
        return {**fields, "archive_image_id": image_id,
                "archive_cann": image_cann_from_files(files, spec.archive)}


def _archive_id(archive: str | None) -> str | None:
    try:
        return read_archive(archive).image_id if archive else None
    except AscendctlError:
        return None


def _config_layout(spec: EngineSpec, held: ArchiveImage) -> dict[str, Any] | None:
    """What a podman node loads the image from when its storage holds every layer: the
    config (base64) and each layer's [diff_id, size] (engine_node.layout_members). docker
    loads only archives, so it always gets the archive."""
    if spec.runtime != "podman" or not held.config or \
            len(held.layer_sizes) != len(held.diff_ids):
        return None
    return {"config": base64.b64encode(held.config).decode("ascii"),
            "layers": [[d, n] for d, n in zip(held.diff_ids, held.layer_sizes)]}
