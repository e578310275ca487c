"""`ascendctl demo`: the whole job on the built-in simulated cluster."""

from __future__ import annotations

import typer

from ascendctl.cli.options import lab_name_option
from ascendctl.exitcodes import EXIT_CODES_HELP
from ascendctl.extras import require_extra


def demo(
    name: str = lab_name_option(),
    down: bool = typer.Option(False, "--down", help="Take the lab down at the end."),
) -> None:
    """Bring up a 2-node simulated Ascend cluster (real systemd, sshd and networks; the
    real vLLM CPU engine), build a tiny model, deploy it in multi-node mode with pipeline
    parallel 2 through the full pipeline (preflight gate, lock, release, weights, rank-
    ordered start, readiness), then print the status and one completion.

    Needs root. The first run builds the node image (a few minutes); later runs reuse it.
    """
    require_extra("lab", "ascendctl demo")
    import json
    import urllib.request

    from ascendctl_runtime.nodeutil import http_url

    from ascendctl.cli.deploy import run_deploy_playbook
    from ascendctl.inventory.pd import entry_port
    from ascendctl.console import get_console
    from ascendctl.load import load_inventory
    from ascendctl_lab import Lab
    from ascendctl.status import collect
    from ascendctl.status.view import status_table
    from ascendctl.transport import SshPool

    console = get_console()
    step = 0

    def say(message: str) -> None:
        nonlocal step
        step += 1
        console.print(f"\n[bold]{step}. {message}[/bold]")

    say(f"simulated cluster '{name}': 2 nodes × 8 simulated 910B3 NPUs")
    lab = Lab(name).up(nodes=2, progress=lambda line: console.print(f"   {line}"))
    console.print(f"   inventory: {lab.inventory_path}")
    console.print(f"   tiny model (Qwen3, built locally): {lab.model_dir}")

    say("deploy: preflight gate → lock → release → weights → rank-ordered start → readiness")
    code = run_deploy_playbook("deploy.yaml", lab.inventory_path, yes=True)
    if code != 0:
        raise typer.Exit(code)

    say("status")
    inv = load_inventory(lab.inventory_path)
    with SshPool(inv.hosts) as pool:
        console.print(status_table(collect(inv, pool)))

    say("one completion through the head node's OpenAI-compatible API")
    url = http_url(inv.head.address, entry_port(inv), "/v1/completions")
    body = {"model": inv.model.served_name, "prompt": "The capital of France is",
            "max_tokens": 12, "temperature": 0}
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        answer = json.load(response)
    console.print(f"   POST {url}")
    console.print(f"   {body['prompt']!r} → {answer['choices'][0]['text']!r}  "
                  f"(random tiny weights: the words are noise, the serving is real)")

    if down:
        say("lab down")
        lab.down()
        return
    console.print(f"\nThe cluster keeps serving. Try:\n"
                  f"  ascendctl status -i {lab.inventory_path}\n"
                  f"  ascendctl history -i {lab.inventory_path}\n"
                  f"  ascendctl lab fault node1 mtu-mismatch --name {name}; "
                  f"ascendctl preflight -i {lab.inventory_path}\n"
                  f"  ascendctl lab down --name {name}")


def register(root: typer.Typer) -> None:
    root.command("demo", epilog=EXIT_CODES_HELP)(demo)
