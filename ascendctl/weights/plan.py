"""Which files (and tensors) every node needs.

Data-parallel, tensor-parallel and Ray layouts: every node needs the whole directory.
Pipeline layouts in mp mode: a node needs the safetensors files holding its stages'
tensors (see `stages`), every non-weight file (config, tokenizer, ...), and its own
`model.safetensors.index.json` listing exactly the local files. A file mixing stages
goes to every node that needs part of it — or, with `repack`, is rewritten into one
file per set of stages so that each node holds only its stages' bytes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascendctl.errors import InputError
from ascendctl.inventory.inputfile import load_json_file
from ascendctl.plan.modelcfg import MAX_LAYERS
from ascendctl.plan.pp_split import PartitionError
from ascendctl.weights.cache import HashCache, default_cache_path
from ascendctl.weights.index import INDEX_NAME, node_index, read_index
from ascendctl.weights.manifest import FileEntry, build_manifest, list_model_files
from ascendctl.weights.repack import repack_file
from ascendctl.weights.safetensors_file import SafetensorsHeader, read_header
from ascendctl.weights.stages import StageSplit, classify, node_stages


@dataclass(frozen=True)
class PlannedFile:
    path: str             # name in the node's model directory
    source: Path          # where the bytes are on the jump host
    entry: FileEntry      # size, sha256, fingerprint
    tensors: tuple[str, ...] = ()


@dataclass
class NodePlan:
    name: str
    rank: int
    stages: frozenset[int] | None          # None: the whole model
    files: list[PlannedFile]
    index: dict | None = None              # the per-node index to write (PP layouts)
    foreign_bytes: int = 0                 # bytes of other stages' tensors it holds

    @property
    def total_bytes(self) -> int:
        return sum(f.entry.size for f in self.files)

    def tensors(self) -> list[str]:
        return sorted(t for f in self.files for t in f.tensors)

    def materialise_request(self, dest: str) -> dict:
        request: dict[str, Any] = {"dest": dest,
                   "files": [{"path": f.path, "sha256": f.entry.sha256} for f in self.files]}
        if self.index is not None:
            request["write"] = {INDEX_NAME: json.dumps(self.index, indent=2) + "\n"}
        return request


@dataclass
class WeightsPlan:
    model_dir: Path
    mode: str
    tp: int
    pp: int
    split: StageSplit | None
    nodes: list[NodePlan]
    mixed_files: list[str] = field(default_factory=list)
    repacked: dict[str, list[str]] = field(default_factory=dict)   # source → outputs
    unassigned: list[str] = field(default_factory=list)            # tensors sent everywhere

    def node(self, name: str) -> NodePlan:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def objects(self) -> dict[str, PlannedFile]:
        """Every distinct object (by sha256) any node needs."""
        out: dict[str, PlannedFile] = {}
        for node in self.nodes:
            for planned in node.files:
                out.setdefault(planned.entry.sha256, planned)
        return out

    def to_dict(self, *, tensors: bool = False) -> dict:
        data: dict[str, Any] = {
            "model_dir": str(self.model_dir),
            "layout": {"mode": self.mode, "tensor_parallel_size": self.tp,
                       "pipeline_parallel_size": self.pp},
            "split": None if self.split is None else {
                "num_layers": self.split.num_layers,
                "stage_layers": [list(r) for r in self.split.ranges],
                "embeddings_on_last_stage": self.split.embed_on_last},
            "mixed_files": self.mixed_files,
            "repacked": self.repacked,
            "unassigned_tensors": self.unassigned,
            "nodes": [],
        }
        for node in self.nodes:
            entry = {
                "name": node.name, "rank": node.rank,
                "stages": None if node.stages is None else sorted(node.stages),
                "bytes": node.total_bytes, "foreign_bytes": node.foreign_bytes,
                "own_index": node.index is not None,
                "files": [{"path": f.path, "size": f.entry.size, "sha256": f.entry.sha256,
                           "tensors": len(f.tensors)} for f in node.files],
            }
            if tensors:
                entry["tensors"] = node.tensors()
            data["nodes"].append(entry)
        return data


@dataclass(frozen=True)
class NodeSpec:
    name: str
    rank: int


def plan_for_inventory(inv, *, repack: bool = False, cache: HashCache | None = None,
                       repack_dir: Path | None = None) -> WeightsPlan:
    if inv.model.source is None:
        raise InputError("model.path is set: the weights are already on every node, there "
                         "is nothing to plan or push (set model.source to push from here)",
                         file=str(inv.path), field="model.source")
    root = Path(os.path.expanduser(inv.model.source))
    if not root.is_dir():
        raise InputError(f"{root} is not a directory on this machine", file=str(inv.path),
                         field="model.source")
    if cache is None:     # the shared hash cache: an unchanged model is not re-hashed
        cache = HashCache(default_cache_path())
    serving = inv.serving
    env = {**{k: str(v) for k, v in serving.env.items()}, **inv.head.env}
    spec = serving.speculative_config or {}
    mtp_drafter = "mtp" in str(spec.get("method", "")).lower()
    # each serving group holds a whole replica: a node's stage comes from its rank within
    # its group, of group_size nodes
    return build_plan(root, [NodeSpec(h.name, h.rank) for h in inv.hosts],
                      nnodes=inv.group_size,
                      mode=serving.mode, tp=serving.tensor_parallel_size,
                      pp=serving.pipeline_parallel_size,
                      partition=env.get("VLLM_PP_LAYER_PARTITION"),
                      mtp_drafter=mtp_drafter, repack=repack, cache=cache,
                      repack_dir=repack_dir)


def build_plan(root: Path, nodes: list[NodeSpec], *, mode: str, tp: int, pp: int,
               nnodes: int | None = None,
               partition: str | None = None, mtp_drafter: bool = False,
               repack: bool = False, cache: HashCache | None = None,
               repack_dir: Path | None = None) -> WeightsPlan:
    root = Path(root)
    cache = cache if cache is not None else HashCache(None)
    names = list_model_files(root)
    index = read_index(root)          # validates every name the index gives
    stage_sets = {n.name: node_stages(mode=mode, tp=tp, pp=pp, nnodes=nnodes or len(nodes),
                                      node_rank=n.rank) for n in nodes}
    if all(s is None for s in stage_sets.values()):
        manifest = build_manifest(root, cache=cache, files=names)
        files = [PlannedFile(e.path, root / e.path, e) for e in manifest.files]
        return WeightsPlan(root, mode, tp, pp, None,
                           [NodePlan(n.name, n.rank, None, list(files)) for n in nodes])
    return _pipeline_plan(root, nodes, names, index, stage_sets, mode=mode, tp=tp, pp=pp,
                          partition=partition, mtp_drafter=mtp_drafter, repack=repack,
                          cache=cache, repack_dir=repack_dir)


def _model_config(root: Path) -> dict:
    path = root / "config.json"
    if not os.path.lexists(path):
        raise InputError("a pipeline-parallel plan needs config.json (num_hidden_layers)",
                         file=str(path))
    # a FIFO, device or directory named config.json is refused here, by the reader
    config = load_json_file(path, what="config.json")
    if not isinstance(config, dict):
        raise InputError("config.json must be a JSON object", file=str(path))
    nested = config.get("text_config")
    text: dict = nested if isinstance(nested, dict) else {}
    layers = text.get("num_hidden_layers", config.get("num_hidden_layers"))
    if isinstance(layers, bool) or not isinstance(layers, int) or not 1 <= layers <= MAX_LAYERS:
        raise InputError(f"num_hidden_layers is missing or not an integer from 1 to "
                         f"{MAX_LAYERS}", file=str(path), field="num_hidden_layers")
    tied = config.get("tie_word_embeddings", text.get("tie_word_embeddings"))
    return {"num_layers": layers, "tied": tied}


def _pipeline_plan(root: Path, nodes: list[NodeSpec], names: list[str], index: dict | None,
                   stage_sets: dict[str, frozenset[int] | None], *, mode: str, tp: int,
                   pp: int, partition: str | None, mtp_drafter: bool, repack: bool,
                   cache: HashCache, repack_dir: Path | None) -> WeightsPlan:
    config = _model_config(root)
    weight_files = [n for n in names if n.endswith(".safetensors")]
    if index is not None:
        indexed = set(index["weight_map"].values())
        weight_files = [n for n in weight_files if n in indexed]
    headers: dict[str, SafetensorsHeader] = {n: read_header(root / n) for n in weight_files}
    if index is not None:
        for tensor, name in index["weight_map"].items():
            if tensor not in {t.name for t in headers[name].tensors}:
                raise InputError(f"index names tensor {tensor!r} in {name}, which does not "
                                 "hold it", file=str(root / INDEX_NAME),
                                 field=f"weight_map.{tensor}")
    has_lm_head = any(t.name.endswith("lm_head.weight")
                      for h in headers.values() for t in h.tensors)
    tied = config["tied"] if isinstance(config["tied"], bool) else not has_lm_head
    try:
        split = StageSplit.build(config["num_layers"], pp, partition,
                                 embed_on_last=tied or mtp_drafter)
    except PartitionError as err:
        raise InputError(str(err), field="serving.env.VLLM_PP_LAYER_PARTITION") from None

    file_groups: dict[str, dict[frozenset[int], list[str]]] = {}
    unassigned = []
    for name, header in headers.items():
        groups: dict[frozenset[int], list[str]] = {}
        for tensor in header.tensors:
            stages = split.stages_of(tensor.name)
            if len(stages) == pp and pp > 1 and _is_other(tensor.name):
                unassigned.append(tensor.name)
            groups.setdefault(stages, []).append(tensor.name)
        file_groups[name] = groups
    mixed = sorted(n for n, g in file_groups.items() if len(g) > 1)

    # The weight files as nodes will see them: (name, source path, tensors, stages)
    pieces: list[tuple[str, Path, tuple[str, ...], frozenset[int]]] = []
    repacked: dict[str, list[str]] = {}
    if repack and mixed:
        manifest = build_manifest(root, cache=cache, files=mixed)
        out_dir = repack_dir or _default_repack_dir()
        for entry in manifest.files:
            outputs = repack_file(headers[entry.path], entry, file_groups[entry.path], out_dir)
            repacked[entry.path] = [o.name for o in outputs]
            for out in outputs:
                pieces.append((out.name, out.path, tuple(out.tensors), out.stages))
    for name, groups in file_groups.items():
        if name in repacked:
            continue
        stages = frozenset().union(*groups) if groups else frozenset(range(pp))
        tensors = tuple(t.name for t in headers[name].tensors)
        pieces.append((name, root / name, tensors, stages))

    others = [n for n in names if n not in headers and n != INDEX_NAME
              and not n.endswith(".safetensors")]
    # hash what nodes will receive: sources, repacked outputs (each hashed once, cached)
    hashed: dict[Path, FileEntry] = {}
    by_dir: dict[Path, list[str]] = {}
    for _name, source, _tensors, _stages in pieces:
        by_dir.setdefault(source.parent, []).append(source.name)
    for name in others:
        by_dir.setdefault((root / name).parent, []).append((root / name).name)
    for directory, dir_files in by_dir.items():
        for entry in build_manifest(directory, cache=cache, files=dir_files).files:
            hashed[directory / entry.path] = entry

    def planned(name: str, source: Path, tensors: tuple[str, ...] = ()) -> PlannedFile:
        entry = hashed[source]
        return PlannedFile(name, source, FileEntry(name, entry.size, entry.sha256,
                                                   entry.fingerprint), tensors)

    metadata = (index or {}).get("metadata") or {}
    node_plans = []
    for node in nodes:
        node_set = stage_sets[node.name]
        assert node_set is not None   # mp mode with pp > 1: every node runs some stage
        stages = node_set
        files = [planned(n, root / n) for n in others]
        weight_map: dict[str, str] = {}
        total = 0
        foreign = 0
        for name, source, tensors, piece_stages in pieces:
            if not piece_stages & stages:
                continue
            item = planned(name, source, tensors)
            files.append(item)
            header = read_header(source)
            for tensor in header.tensors:
                weight_map[tensor.name] = name
                total += tensor.nbytes
                if not split.stages_of(tensor.name) & stages:
                    foreign += tensor.nbytes
        node_plans.append(NodePlan(node.name, node.rank, stages,
                                   sorted(files, key=lambda f: f.path),
                                   node_index(metadata, weight_map, total), foreign))
    return WeightsPlan(root, mode, tp, pp, split, node_plans, mixed, repacked,
                       sorted(set(unassigned)))


def _is_other(name: str) -> bool:
    return classify(name).kind == "other"


def _default_repack_dir() -> Path:
    return default_cache_path().parent / "repack"
