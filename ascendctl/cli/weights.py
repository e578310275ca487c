"""`ascendctl weights manifest|plan|push|verify|link`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ascendctl.cli.options import inventory_option, json_option
from ascendctl.exitcodes import EXIT_CODES_HELP

app = typer.Typer(help="Model weights: manifests, per-stage plans, relayed pushes into each "
                       "node's content-addressed store, verification.",
                  no_args_is_help=True, epilog=EXIT_CODES_HELP)

REPACK_HELP = ("Rewrite safetensors files that mix pipeline stages into one file per stage, "
               "so each node holds only its stages' bytes (same flag for plan, push, "
               "verify and link).")


def _load(inventory: Path, repack: bool, no_cache: bool = False):
    from ascendctl.load import load_inventory
    from ascendctl.weights.cache import HashCache, default_cache_path
    from ascendctl.weights.plan import plan_for_inventory

    inv = load_inventory(inventory)
    cache = HashCache(None if no_cache else default_cache_path())
    return inv, plan_for_inventory(inv, repack=repack, cache=cache)


@app.command("manifest")
def manifest(directory: Path = typer.Argument(..., help="Model directory."),
             out: Optional[Path] = typer.Option(None, "--out", "-o",
                                                help="Also write the manifest JSON here."),
             no_cache: bool = typer.Option(False, "--no-cache",
                                           help="Hash everything again (ignore the cache)."),
             as_json: bool = json_option()) -> None:
    """Size, sha256 and sampled fingerprint of every file of DIRECTORY.

    Hashes in parallel; results are cached by (path, size, mtime) in
    ~/.cache/ascendctl/weights-hash-cache.json (ASCENDCTL_HASH_CACHE overrides), so an
    unchanged directory is manifested again in a moment. Paths in the manifest are
    relative. Symlinks and index entries leading outside DIRECTORY are refused.
    """
    import time

    from ascendctl.weights.cache import HashCache, default_cache_path
    from ascendctl.weights.index import read_index
    from ascendctl.weights.manifest import build_manifest
    from ascendctl.weights.progress import human_bytes

    started = time.monotonic()
    read_index(directory)
    cache = HashCache(None if no_cache else default_cache_path())
    result = build_manifest(directory, cache=cache)
    elapsed = time.monotonic() - started
    if out is not None:
        out.write_text(result.to_json())
    if as_json:
        typer.echo(result.to_json(), nl=False)
        return
    for entry in result.files:
        typer.echo(f"{entry.sha256}  {entry.size:>14}  {entry.path}")
    typer.echo(f"{len(result.files)} files, {human_bytes(result.total_bytes)} "
               f"({cache.hits} from cache) in {elapsed:.2f}s")


@app.command("plan")
def plan(inventory: Path = inventory_option(),
         repack: bool = typer.Option(False, "--repack", help=REPACK_HELP),
         tensors: bool = typer.Option(False, "--tensors",
                                      help="List every node's tensors (with --json)."),
         as_json: bool = json_option()) -> None:
    """Which files (and tensors) each node needs for the inventory's layout.

    Data-, tensor-parallel and Ray layouts: the whole directory on every node. Pipeline
    layouts (mode mp): only the stages the node runs, with a per-node
    model.safetensors.index.json listing exactly its files.
    """
    from ascendctl.console import print_json
    from ascendctl.weights.progress import human_bytes

    _inv, result = _load(inventory, repack)
    if as_json:
        print_json(result.to_dict(tensors=tensors))
        return
    if result.split is not None:
        layers = ", ".join(f"stage {i}: layers {a}-{b - 1}"
                           for i, (a, b) in enumerate(result.split.ranges))
        typer.echo(f"pipeline split ({result.split.num_layers} layers): {layers}")
    for name in result.mixed_files:
        state = "repacked" if name in result.repacked else "sent whole to every stage using it"
        typer.echo(f"mixed stages: {name} ({state})")
    for node in result.nodes:
        stages = "all" if node.stages is None else ",".join(map(str, sorted(node.stages)))
        extra = f", {human_bytes(node.foreign_bytes)} of other stages" \
            if node.foreign_bytes else ""
        typer.echo(f"{node.name} (rank {node.rank}, stages {stages}): {len(node.files)} files, "
                   f"{human_bytes(node.total_bytes)}{extra}"
                   f"{', own index' if node.index is not None else ''}")
        for planned in node.files:
            typer.echo(f"    {planned.path}  {human_bytes(planned.entry.size)}")


@app.command("push")
def push(inventory: Path = inventory_option(),
         repack: bool = typer.Option(False, "--repack", help=REPACK_HELP),
         no_progress: bool = typer.Option(False, "--no-progress",
                                          help="No progress bars or lines."),
         as_json: bool = json_option()) -> None:
    """Send each node what its plan lists, into <deploy.root>/store (content-addressed).

    Checks free disk on every node before the first byte; resumes interrupted pushes
    (per file and within a file); relays node to node so N nodes take about as long as
    one; verifies sha256 on arrival; repairs objects found corrupt. Progress goes to
    stderr (bars on a terminal, lines otherwise).
    """
    from ascendctl.console import print_json
    from ascendctl.errors import AscendctlError
    from ascendctl.weights.progress import human_bytes
    from ascendctl.weights.push import push as run_push

    inv, weights_plan = _load(inventory, repack)
    summary = run_push(inv, weights_plan, show_progress=not no_progress)
    if as_json:
        print_json(summary.to_dict())
    else:
        for node in summary.nodes.values():
            state = "ok" if node["ok"] else "FAILED"
            typer.echo(f"{node['name']}: {state} — {node['objects']} files, "
                       f"{node['already_present']} already there, wrote "
                       f"{human_bytes(node['written'])}"
                       + (f", repaired {', '.join(node['repaired'])}" if node["repaired"]
                          else ""))
        for (src, dst), count in summary.links.items():
            typer.echo(f"  link {src} → {dst}: {human_bytes(count)}")
        typer.echo(f"sent {human_bytes(summary.bytes_from_jump_host)} from this host in "
                   f"{summary.seconds:.1f}s")
    if not summary.ok:
        raise AscendctlError("push failed: " + "; ".join(summary.errors[:5]))


@app.command("verify")
def verify(inventory: Path = inventory_option(),
           full: bool = typer.Option(False, "--full", help="sha256 of every file (slow)."),
           repack: bool = typer.Option(False, "--repack", help=REPACK_HELP),
           as_json: bool = json_option()) -> None:
    """Check every node's files: sizes and sampled fingerprints (fast), or full sha256.

    Exit 1 naming node and file on any mismatch; 4 if a node cannot be reached.
    """
    from ascendctl.console import print_json
    from ascendctl.errors import AscendctlError
    from ascendctl.exitcodes import Exit
    from ascendctl.weights.verify import verify as run_verify

    inv, weights_plan = _load(inventory, repack)
    report = run_verify(inv, weights_plan, full=full)
    if as_json:
        print_json(report.to_dict())
    else:
        for name, count in report.nodes.items():
            bad = [m for m in report.mismatches if m.node == name]
            typer.echo(f"{name}: {'ok' if not bad else 'MISMATCH'} ({count} files, "
                       f"{'sha256' if full else 'fingerprints'})")
            for mismatch in bad:
                typer.echo(f"    {mismatch.path}: {mismatch.reason}")
        for name, error in report.unreachable.items():
            typer.echo(f"{name}: unreachable: {error}")
    if report.unreachable:
        raise AscendctlError("unreachable: " + ", ".join(report.unreachable),
                             exit_code=Exit.UNREACHABLE)
    if report.mismatches:
        raise AscendctlError("weights differ: " + "; ".join(map(str, report.mismatches[:5])))


@app.command("link")
def link(inventory: Path = inventory_option(),
         dest: str = typer.Option(..., "--dest", help="Absolute directory on every node, "
                                                      "e.g. <release>/model."),
         repack: bool = typer.Option(False, "--repack", help=REPACK_HELP),
         as_json: bool = json_option()) -> None:
    """Make DEST on every node a model directory: symlinks into the store plus the node's
    own index. Nothing is copied (this is what a release's model/ is)."""
    from ascendctl.console import print_json
    from ascendctl.errors import AscendctlError
    from ascendctl.transport import SshPool
    from ascendctl.weights.remote import materialise_model, node_access

    inv, weights_plan = _load(inventory, repack)
    with SshPool(inv.hosts) as pool:
        results = pool.map(lambda conn: materialise_model(
            conn, node_access(inv, inv.host(conn.settings.name)),
            weights_plan.node(conn.settings.name), dest))
    failed = {n: r.error for n, r in results.items() if r.status != "ok"}
    if as_json:
        print_json({"ok": not failed, "dest": dest,
                    "nodes": [{"name": n, "ok": r.status == "ok", "error": r.error,
                               "changed": bool((r.value or {}).get("changed"))}
                              for n, r in results.items()]})
    else:
        for name, result in results.items():
            state = ("changed" if (result.value or {}).get("changed") else "unchanged") \
                if result.status == "ok" else result.error
            typer.echo(f"{name}: {state}")
    if failed:
        raise AscendctlError("; ".join(f"{n}: {e}" for n, e in failed.items()))


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="weights")
