"""`ascendctl lab ...`: a simulated Ascend cluster of real Linux nodes on this machine."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer
from typer.core import TyperCommand

from ascendctl.cli.options import json_option, lab_name_option
from ascendctl.exitcodes import EXIT_CODES_HELP
from ascendctl.extras import require_extra

app = typer.Typer(
    help="A simulated Ascend cluster: systemd-nspawn nodes with real systemd, sshd and "
         "networks, simulated npu-smi/hccn_tool, fault injection. Needs root.",
    no_args_is_help=True, epilog=EXIT_CODES_HELP)


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class FaultCommand(TyperCommand):
    """`lab fault`, whose help lists the fault kinds of the lab: read from ascendctl_lab
    (standard library only, no extra needed) when the help is shown, so no other command
    imports the lab."""

    @property
    def help(self) -> str:
        from ascendctl_lab.faults import describe

        return ("Inject a fault into NODE. KIND is one of:\n\n"
                + describe().replace("\n", "\n\n"))

    @help.setter
    def help(self, _text: object) -> None:
        pass


@app.command("up")
def up(nodes: int = typer.Option(2, "--nodes", help="Number of nodes."),
       npus_per_node: int = typer.Option(8, "--npus-per-node", help="NPUs per node."),
       chip: str = typer.Option("910B3", "--chip", help="910B1, 910B2, 910B3 or 910B4."),
       name: str = lab_name_option(),
       no_vllm: bool = typer.Option(False, "--no-vllm",
                                    help="Boot from the base image only (no /opt/vllm)."),
       engine: str = typer.Option(
           "host", "--engine",
           help="How the lab inventory runs vLLM: host (/opt/vllm on the nodes), container "
                "(the lab engine image with podman, moved as an archive; see `lab "
                "engine-image`), venv (built on every node from the lab wheelhouse) or "
                "standin (the lab's stand-in for `vllm serve`, for tests of the "
                "orchestration: docs/lab.md)."),
       replicas: int = typer.Option(
           1, "--replicas", min=1,
           help="Serving groups (replicas of the model) the inventory makes of the nodes: "
                "--nodes / --replicas nodes each, behind nginx on node0, with an API key "
                "and the quality gate (docs/replicas.md). --replicas 2 with the default 2 "
                "nodes: two single-node groups."),
       pd: bool = typer.Option(
           False, "--pd",
           help="Prefill and decode disaggregated: node 2k prefills, node 2k+1 decodes, one "
                "PD unit per pair, behind nginx on node0; KV passes through the directory "
                "the nodes share (docs/lab.md). Needs an even --nodes; not with --replicas."),
       as_json: bool = json_option()) -> None:
    """Build (or reuse) the node image, boot the nodes, write the lab inventory."""
    from ascendctl.console import print_json
    require_extra("lab", "ascendctl lab up")
    from ascendctl_lab import Lab

    lab = Lab(name).up(nodes=nodes, npus_per_node=npus_per_node, chip=chip,
                       progress=_progress, with_vllm=not no_vllm, engine=engine,
                       replicas=replicas, pd=pd)
    if as_json:
        print_json(lab.status())
    else:
        typer.echo(str(lab.inventory_path))


@app.command("down")
def down(name: str = lab_name_option()) -> None:
    """Stop the nodes and remove everything `lab up` created."""
    require_extra("lab", "ascendctl lab down")
    from ascendctl_lab import Lab

    Lab(name).down(progress=_progress)


@app.command("status")
def status(name: str = lab_name_option(), as_json: bool = json_option()) -> None:
    """Show the lab's nodes, addresses and system state."""
    from ascendctl.console import print_json
    require_extra("lab", "ascendctl lab status")
    from ascendctl_lab import Lab

    data = Lab(name).status()
    if as_json:
        print_json(data)
        return
    if not data["up"]:
        typer.echo(f"lab {name!r} is not up")
        raise typer.Exit(1)
    typer.echo(f"lab {data['name']} (index {data['index']}): {len(data['nodes'])} x "
               f"{data['npus_per_node']} {data['chip']}; inventory {data['inventory']}")
    for node in data["nodes"]:
        faults = ", ".join(node["faults"]) or "-"
        typer.echo(f"  {node['name']:<8} {node['mgmt_ip']:<15} {node['system']:<10} "
                   f"faults: {faults}")


@app.command("exec", context_settings={"allow_extra_args": True,
                                       "ignore_unknown_options": True})
def exec_(node: str = typer.Argument(..., help="Node name (node0, node1, ...)."),
          command: List[str] = typer.Argument(..., help="Command and arguments (after --)."),
          name: str = lab_name_option()) -> None:
    """Run a command inside NODE (via nsenter, works even with sshd down)."""
    require_extra("lab", "ascendctl lab exec")
    from ascendctl_lab import Lab

    proc = Lab(name).exec(node, list(command), check=False, timeout=None)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    raise typer.Exit(proc.returncode)


@app.command("fault", cls=FaultCommand, short_help="Inject a fault into NODE.")
def fault(node: str = typer.Argument(..., help="Node name."),
          kind: str = typer.Argument(..., help="Fault kind (see the list above)."),
          value: Optional[str] = typer.Argument(None, help="Optional value (port, size, ...)."),
          name: str = lab_name_option()) -> None:
    require_extra("lab", "ascendctl lab fault")
    from ascendctl_lab import Lab

    typer.echo(Lab(name).fault(node, kind, value))


@app.command("heal")
def heal(node: Optional[str] = typer.Argument(None, help="Node name; all nodes if omitted."),
         name: str = lab_name_option()) -> None:
    """Undo every injected fault (on NODE or on all nodes)."""
    require_extra("lab", "ascendctl lab heal")
    from ascendctl_lab import Lab

    healed = Lab(name).heal(node)
    typer.echo("healed: " + ", ".join(healed))


@app.command("model")
def model(out: Path = typer.Option(..., "--out", help="Directory to write the model into."),
          moe: bool = typer.Option(False, "--moe", help="Qwen3-MoE instead of dense Qwen3."),
          as_json: bool = json_option()) -> None:
    """Build a tiny Qwen3 checkpoint and tokenizer locally (no downloads)."""
    from ascendctl.console import print_json

    require_extra("lab", "ascendctl lab model")
    from ascendctl_lab.model import build_model

    info = build_model(out, moe=moe)
    if as_json:
        print_json(info)
    else:
        typer.echo(f"{info['path']}: {info['architecture']}, {len(info['files'])} files, "
                   f"{info['bytes']} bytes")


@app.command("image")
def image(rebuild: bool = typer.Option(False, "--rebuild", help="Rebuild every layer."),
          no_vllm: bool = typer.Option(False, "--no-vllm", help="Base layer only."),
          as_json: bool = json_option()) -> None:
    """Build the node image (cached by recipe) and show the cached layers."""
    from ascendctl.console import print_json
    require_extra("lab", "ascendctl lab image")
    from ascendctl_lab.hostcmd import check_host
    from ascendctl_lab.image import ensure_image, list_images

    check_host()
    ensure_image(_progress, rebuild=rebuild, with_vllm=not no_vllm)
    layers = list_images()
    if as_json:
        print_json(layers)
    else:
        for layer in layers:
            typer.echo(f"{layer['name']:<24} {'ready' if layer['complete'] else 'partial':<8} "
                       f"{layer['path']}")


@app.command("engine-image")
def engine_image(tag: str = typer.Option("v1", "--tag",
                                         help="Image tag; each tag is a different image ID "
                                              "(a label in its config), over the same "
                                              "layers."),
                 as_json: bool = json_option()) -> None:
    """Build (once, cached) an image archive of the lab's vLLM CPU engine, with a
    simulated CANN toolkit, and print its reference and archive path."""
    from ascendctl.console import print_json
    require_extra("lab", "ascendctl lab engine-image")
    from ascendctl_lab.engine_image import build_engine_image
    from ascendctl_lab.hostcmd import check_host

    check_host()
    built = build_engine_image(tag, progress=_progress)
    if as_json:
        print_json(built.to_dict())
    else:
        typer.echo(f"{built.image} {built.image_id[:19]} {built.archive}")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="lab")
