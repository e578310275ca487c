"""`ascendctl plan`: will the model fit, with how much KV cache, and with which flags."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ascendctl.cli.options import inventory_option, json_option
from ascendctl.exitcodes import EXIT_CODES_HELP


def plan(inventory: Path = inventory_option(),
         model_config: Optional[Path] = typer.Option(
             None, "--model-config", help="A Hugging Face config.json (default: "
             "model.config, <model.source>/config.json, then model.builtin_config)."),
         as_json: bool = json_option()) -> None:
    """Plan memory per NPU for the inventory's layout and rank the alternatives.

    Prints weights, KV budget and maximum concurrent sequences at max_model_len per NPU,
    the recommended layout and the vLLM flags it implies. Exits 1 when the inventory's
    layout cannot fit (the numbers are printed first). Nothing is contacted.
    """
    from ascendctl.console import get_console, print_json
    from ascendctl.load import load_inventory
    from ascendctl.plan import plan_inventory, refusal_message
    from ascendctl.plan.flags import engine_flags, launch_flags
    from ascendctl.plan.planner import PlanRefused
    from ascendctl.plan.report import print_plan
    from ascendctl.releases.scope import pinned_release, tutorial_for

    from ascendctl.drift import option_warnings

    inv = load_inventory(inventory, check_files=False)
    warnings = option_warnings(inv)
    for warning in warnings if not as_json else ():
        typer.echo(f"warning: {warning}", err=True)
    if inv.pd is not None:
        _plan_pd(inv, model_config, as_json, warnings)
        return
    result = plan_inventory(inv, model_config_path=model_config)
    rec = result.recommended
    flags = {}
    tutorial = tutorial_for(pinned_release(inv), inv.model)
    for key, layout_plan in (("requested", result.requested), ("recommended", rec)):
        if layout_plan is not None:
            flags[key] = launch_flags(layout_plan.layout) + engine_flags(
                inv.serving, inv.model, layout_plan.layout,
                checkpoint_dtype=result.model.torch_dtype, tutorial=tutorial)
    if as_json:
        print_json(result.as_dict() | {"flags": flags, "option_warnings": warnings})
    else:
        console = get_console()
        print_plan(result, console)
        if rec is not None:
            import shlex

            console.print("vLLM flags for the recommended layout (the head's addresses and "
                          "ports come from `ascendctl render`): "
                          + shlex.join(flags["recommended"]), markup=False, soft_wrap=True)
    if not result.requested.fits:
        raise PlanRefused(refusal_message(result), result)


def _plan_pd(inv, model_config: Optional[Path], as_json: bool, warnings: list[str]) -> None:
    """Each side of a PD inventory planned on its own (ascendctl/plan/pd_plan.py)."""
    from ascendctl.console import get_console, print_json
    from ascendctl.plan.pd_plan import plan_pd, print_pd_plan, refusal
    from ascendctl.plan.planner import PlanRefused

    sides = plan_pd(inv, model_config_path=model_config)
    if as_json:
        print_json({"pd": {side.role: side.as_dict() for side in sides},
                    "option_warnings": warnings})
    else:
        print_pd_plan(sides, get_console())
    if not all(side.fits for side in sides):
        raise PlanRefused(refusal(sides), next(s.plan for s in sides if not s.fits))


def register(root: typer.Typer) -> None:
    root.command("plan", epilog=EXIT_CODES_HELP)(plan)
