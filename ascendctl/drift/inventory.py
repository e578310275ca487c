"""The option-drift guard applied to an inventory: the rendered `vllm serve` command of a
head and a follower, the engine environment and `serving.additional_config`, against the
release `versions.vllm_ascend` pins. Without that pin nothing is checked.

Fatal findings are raised by the loader (`refuse_option_drift`), so `inventory check`,
`plan`, `deploy` and `deploy --check` all stop at the same line; the warnings are printed
by those commands (`option_warnings`)."""

from __future__ import annotations

from typing import Any

from ascendctl.drift.guard import Argv, Finding, check_options
from ascendctl.drift.schema import load_schema
from ascendctl.errors import InputError
from ascendctl.inventory.hosts import Host, Inventory
from ascendctl.inventory.yamlsrc import YamlPath, dotted
from ascendctl.render.engine import engine_argv, engine_environment

SERVING: YamlPath = ("all", "vars", "serving")
PIN: YamlPath = ("all", "vars", "versions", "vllm_ascend")
RELEASE_DIR = "/release"
# the inventory field behind each option the rendered command passes
FLAG_FIELDS: dict[str, YamlPath] = {
    "--api-server-count": SERVING + ("api_server_count",),
    "--data-parallel-rpc-port": SERVING + ("data_parallel_rpc_port",),
    "--master-port": SERVING + ("master_port",),
    "--tensor-parallel-size": SERVING + ("tensor_parallel_size",),
    "--pipeline-parallel-size": SERVING + ("pipeline_parallel_size",),
    "--enable-expert-parallel": SERVING + ("enable_expert_parallel",),
    "--max-num-seqs": SERVING + ("max_num_seqs",),
    "--max-model-len": SERVING + ("max_model_len",),
    "--max-num-batched-tokens": SERVING + ("max_num_batched_tokens",),
    "--gpu-memory-utilization": SERVING + ("gpu_memory_utilization",),
    "--enable-prefix-caching": SERVING + ("enable_prefix_caching",),
    "--no-enable-prefix-caching": SERVING + ("enable_prefix_caching",),
    "--enforce-eager": SERVING + ("enforce_eager",),
    "--speculative-config": SERVING + ("speculative_config",),
    "--compilation-config": SERVING + ("compilation_config",),
    "--additional-config": SERVING + ("additional_config",),
    "--quantization": ("all", "vars", "model", "quantization"),
    "--trust-remote-code": ("all", "vars", "model", "trust_remote_code"),
    "--dtype": ("all", "vars", "model", "dtype"),
    "--served-model-name": ("all", "vars", "model", "served_name"),
}
# the engine variables ascendctl sets itself, and the field they come from
RECIPE_ENV_FIELDS: dict[str, YamlPath] = {
    "VLLM_ENGINE_READY_TIMEOUT_S": SERVING + ("startup_timeout",),
    "VLLM_RPC_TIMEOUT": SERVING + ("startup_timeout",),
}


def option_findings(inv: Inventory) -> list[Finding]:
    """Fatal findings first; [] when versions.vllm_ascend is not pinned. Each finding's
    `where` is a YAML path of the inventory."""
    pinned = inv.versions.vllm_ascend
    if not pinned:
        return []
    return _compute(inv, pinned)


def _compute(inv: Inventory, pinned: str) -> list[Finding]:
    schema = load_schema()
    release = schema.release_of(pinned)
    if release is None:
        return [Finding(False, f"no option schema for vllm-ascend {pinned} (the data covers "
                        f"{schema.covered}): vllm serve options, additional_config keys and "
                        "environment variables are not checked against it", PIN)]
    return check_options(schema, release, argvs=_argvs(inv),
                         env=_environment(inv), additional_config=_configs(inv))


def _argvs(inv: Inventory) -> list[Argv]:
    extra = len(inv.serving.extra_args)
    out = []
    for host in _representatives(inv):
        argv = engine_argv(inv, host, RELEASE_DIR, checkpoint_dtype=None)
        if argv is None:
            continue
        items = argv[2:]     # after `<engine> serve`
        origins: list[YamlPath] = []
        for index, item in enumerate(items):
            if index >= len(items) - extra:
                origins.append(SERVING + ("extra_args", index - (len(items) - extra)))
            else:
                origins.append(FLAG_FIELDS.get(item, PIN))
        out.append(Argv(items, origins))
    return out


def _representatives(inv: Inventory) -> list[Host]:
    """The head and one follower: every other node runs the same options."""
    hosts = [inv.head]
    if inv.followers:
        hosts.append(inv.followers[0])
    return hosts


def _environment(inv: Inventory) -> list[tuple[str, YamlPath, str | None]]:
    written: dict[str, YamlPath] = {name: SERVING + ("env", name) for name in inv.serving.env}
    for host in inv.hosts:
        for name in host.env:
            written.setdefault(name, _host_env_path(inv, host, name))
    names = [name for name, _value in engine_environment(inv, inv.head, RELEASE_DIR,
                                                             nic="eth0")]
    for host in inv.hosts:
        names += [n for n in host.env if n not in names]
    out: list[tuple[str, YamlPath, str | None]] = []
    for name in names:
        if name in written:
            out.append((name, written[name], None))
        else:
            field = RECIPE_ENV_FIELDS.get(name)
            out.append((name, field or PIN, dotted(field[2:]) if field else "the recipe"))
    return out


def _host_env_path(inv: Inventory, host: Host, name: str) -> YamlPath:
    for path, line in inv.source.lines.items():
        if len(path) >= 2 and path[-2:] == ("env", name) and host.name in path and line:
            return tuple(path)
    return PIN


def _configs(inv: Inventory) -> list[tuple[dict[str, Any], YamlPath]]:
    """One mapping per key, so that each finding points at its key."""
    config = inv.serving.additional_config or {}
    return [({key: value}, SERVING + ("additional_config", key)) for key, value in config.items()]


def located(inv: Inventory, finding: Finding) -> tuple[int | None, str]:
    """The line and dotted field of a finding's YAML path (the nearest written ancestor,
    else the pin)."""
    path = finding.where if isinstance(finding.where, tuple) else PIN
    if path not in inv.source.lines and inv.source.line_of(path) is None:
        path = PIN
    return inv.source.line_of(path), dotted(path)


def refuse_option_drift(inv: Inventory) -> None:
    """Raise InputError for the first finding the engine would refuse at start-up."""
    for finding in option_findings(inv):
        if finding.fatal:
            line, field = located(inv, finding)
            raise InputError(finding.message, file=str(inv.path), line=line, field=field)


def option_warnings(inv: Inventory) -> list[str]:
    """`file:line: field: message` of every warning (what the engine would ignore)."""
    lines = []
    for finding in option_findings(inv):
        if not finding.fatal:
            line, field = located(inv, finding)
            lines.append(f"{inv.path}:{line}: {field}: {finding.message}" if line
                         else f"{inv.path}: {field}: {finding.message}")
    return lines
