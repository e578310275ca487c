"""Read vllm-ascend's own PD layouts into a `PdLayout`.

Three formats, told apart by their top-level keys:
- `deployment` + `disaggregated_prefill`: the nightly multi-node test configs of
  tests/e2e/*/multi_node/internal_dp/config/ (one `vllm serve` string per node, vLLM's own
  DP: `--data-parallel-size-local` ranks in one server);
- `config` + `routing` + `templates`: tests/e2e/*/multi_node/external_dp/config/ (one
  server per DP rank, launched by the harness from each node's `config` entry);
- `nodes` (+ `proxy`): a docs recipe kept as data: each node's shell script verbatim, its
  `launch_online_dp.py` line when the docs start it that way, and the proxy command.

Every value keeps the line it was read from. Bad input is an InputError naming
`file:line: field:`; sizes are bounded (file, nodes, command words, JSON).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ascendctl.errors import InputError
from ascendctl.inventory.excerpt import excerpt
from ascendctl.inventory.inputfile import parse_json, read_input_text
from ascendctl.inventory.yamlsrc import SourceMap, YamlPath, dotted, load_yaml_with_lines
from ascendctl.pd.command import (
    ServeCommand, Token, locate_words, parse_serve, placeholder, split_command,
)
from ascendctl.pd.layout import (
    PROXY_P_FIRST, ExtraLayout, KvTransfer, NodeLaunch, PdLayout, ProxyBackend, ProxySpec, Role,
    Where,
)

MAX_PD_FILE_BYTES = 1 << 20
MAX_NODES = 256
MAX_NPUS_PER_NODE = 64
MAX_JSON_CHARS = 64 << 10
# vLLM's KVTransferConfig default when kv_port is not given
VLLM_DEFAULT_KV_PORT = 14579
# the internal_dp harness's port when a config sets no SERVER_PORT (multi_node_config.py)
HARNESS_DEFAULT_SERVER_PORT = 8080
# the external_dp harness runs its proxy on node 0, port 1999 (external_dp_config.py)
HARNESS_EXTERNAL_PROXY_PORT = 1999

# `vllm serve` flag → NodeLaunch field; a `$VAR` value is resolved by the format's reader
FLAG_FIELDS = {
    "--port": "api_port",
    "--data-parallel-size": "dp_size",
    "--data-parallel-size-local": "dp_size_local",
    "--data-parallel-start-rank": "dp_rank_start",
    "--data-parallel-rank": "dp_rank_start",
    "--data-parallel-rpc-port": "dp_rpc_port",
    "--tensor-parallel-size": "tp_size",
}
# launch_online_dp.py option → field (examples/external_online_dp/launch_online_dp.py)
LAUNCH_FIELDS = {
    "--dp-size": "dp_size", "--tp-size": "tp_size", "--dp-size-local": "dp_size_local",
    "--dp-rank-start": "dp_rank_start", "--dp-address": "dp_address",
    "--dp-rpc-port": "dp_rpc_port", "--vllm-start-port": "api_port",
}
# external_dp `config[i]` key → field
EXTERNAL_NODE_FIELDS = {
    "port_start": "api_port", "dp_rpc_port": "dp_rpc_port", "dp_size": "dp_size",
    "dp_size_local": "dp_size_local", "dp_rank_start": "dp_rank_start", "tp_size": "tp_size",
    "dp_address": "dp_address",
}
INT_FIELDS = ("api_port", "dp_size", "dp_size_local", "dp_rank_start", "dp_rpc_port",
              "tp_size")
_DECIMAL = re.compile(r"[0-9]{1,6}")
_NODE_IP = re.compile(r"\$\{?NODE_([0-9]{1,3})_IP\}?")
_LOCAL_IP_ASSIGN = re.compile(r"""^\s*local_ip=["']?([^"'\s#]+)""", re.MULTILINE)
_VISIBLE = re.compile(r"^\s*export\s+ASCEND_RT_VISIBLE_DEVICES=([0-9,]+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Value:
    """A raw value and where it was written."""

    raw: Any
    where: Where


class _Reader:
    """Strict typed access to the loaded document, every failure located."""

    def __init__(self, file: str, source: SourceMap, text: str):
        self.file = file
        self.source = source
        self.lines = text.splitlines()

    def where(self, path: YamlPath) -> Where:
        return Where(self.file, self.source.line_of(path))

    def fail(self, path: YamlPath, message: str, line: int | None = None) -> InputError:
        return InputError(message, file=self.file,
                          line=line if line is not None else self.source.line_of(path),
                          field=dotted(path) or None)

    def mapping(self, value: Any, path: YamlPath) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"must be a mapping, not {excerpt(value)}")
        return value

    def sequence(self, value: Any, path: YamlPath, *, limit: int = MAX_NODES) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(path, f"must be a list, not {excerpt(value)}")
        if len(value) > limit:
            raise self.fail(path, f"{len(value)} items is more than {limit}")
        return value

    def text(self, value: Any, path: YamlPath) -> str:
        if not isinstance(value, str):
            raise self.fail(path, f"must be text, not {excerpt(value)}")
        return value

    def integer(self, value: Any, path: YamlPath, *, minimum: int = 0, maximum: int = 65535,
                line: int | None = None) -> int:
        """An int, or text of plain decimal digits (the configs quote ports in JSON)."""
        if isinstance(value, str) and _DECIMAL.fullmatch(value.strip()):
            value = int(value.strip())
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"must be a whole number, not {excerpt(value)}", line)
        if not minimum <= value <= maximum:
            raise self.fail(path, f"{value} is outside {minimum}..{maximum}", line)
        return value


def load_pd_layout(path: str | os.PathLike[str]) -> PdLayout:
    """The PD layout in PATH, in any of the three upstream formats."""
    file = str(path)
    text = read_input_text(path, limit=MAX_PD_FILE_BYTES, what="PD layout file")
    data, source = load_yaml_with_lines(Path(path), max_bytes=MAX_PD_FILE_BYTES,
                                        what="PD layout file")
    reader = _Reader(file, source, text)
    root = reader.mapping(data, ())
    if "deployment" in root:
        return _InternalDp(reader, root).layout()
    if "templates" in root:
        return _ExternalDp(reader, root).layout()
    if "nodes" in root:
        return _Recipe(reader, root).layout()
    raise InputError("not a PD layout: expected `deployment` (internal_dp config), "
                     "`templates` (external_dp config) or `nodes` (docs recipe)", file=file,
                     line=source.line_of(()))


# ---- shared: one node from its command and the values its format supplies ----

@dataclass
class _NodeInput:
    index: int
    role: Role
    npus: int
    command: ServeCommand
    command_where: Where
    # field → value written outside the command (external config entry, launch line, env)
    params: dict[str, Value]
    external_dp: bool
    resolve_address: Callable[[str], int | None]
    path: YamlPath
    npus_where: Where | None = None


def _build_node(reader: _Reader, spec: _NodeInput) -> NodeLaunch:
    where: dict[str, Where] = {"node": reader.where(spec.path),
                               "npus": spec.npus_where or reader.where(("npu_per_node",))}
    fields: dict[str, Any] = {}
    cmd = spec.command
    if cmd.missing:
        flag, line = next(iter(cmd.missing.items()))
        raise reader.fail(spec.path, f"{flag} has no value (the next word is a flag or the "
                                     "end): vLLM's argument parser refuses the command", line)

    def take(name: str, flag: str, *, keep_variable: bool = False) -> None:
        token = cmd.value(flag)
        if token is not None and (keep_variable or placeholder(token.text) is None):
            if keep_variable and placeholder(token.text) and name in spec.params:
                fields[name] = (spec.params[name].raw, spec.params[name].where)
            else:
                fields[name] = (token.text, Where(reader.file, token.line))
        elif name in spec.params:
            fields[name] = (spec.params[name].raw, spec.params[name].where)
        elif token is not None:
            raise reader.fail(spec.path, f"{flag} {token.text}: the variable is not set "
                                         "by this config", token.line)

    for flag, name in FLAG_FIELDS.items():
        if name not in fields:
            take(name, flag)
    # an address variable ($LOCAL_IP, ${MASTER_IP_ADDRESS}) is resolved to a node below
    take("dp_address", "--data-parallel-address", keep_variable=True)

    ints: dict[str, int] = {}
    for name in INT_FIELDS:
        if name in fields:
            raw, at = fields[name]
            limits = (1, 65535) if name in ("api_port", "dp_rpc_port") else \
                (0, 4096) if name == "dp_rank_start" else (1, 4096)
            ints[name] = reader.integer(raw, spec.path + (name,), minimum=limits[0],
                                        maximum=limits[1], line=at.line)
            where[name] = at
    dp_size = ints.get("dp_size", 1)
    tp_size = ints.get("tp_size", 1)
    dp_size_local = ints.get("dp_size_local", dp_size)
    dp_rank_start = ints.get("dp_rank_start", 0)

    dp_address = None
    dp_master = None
    if "dp_address" in fields:
        raw, where["dp_address"] = fields["dp_address"]
        dp_address = reader.text(raw, spec.path + ("dp_address",))
        dp_master = spec.resolve_address(dp_address)

    kv = _kv_transfer(reader, cmd, spec, where)
    spec_tokens = _speculative_tokens(reader, cmd, spec, where)
    recompute = _recompute_scheduler(reader, cmd, spec, where)
    prefix = True
    for switch, enabled in (("--no-enable-prefix-caching", False),
                            ("--enable-prefix-caching", True)):
        if switch in cmd.switches:
            prefix = enabled
            where["prefix_caching"] = Where(reader.file, cmd.switches[switch])
    headless = "--headless" in cmd.switches
    if headless:
        where["headless"] = Where(reader.file, cmd.switches["--headless"])
    return NodeLaunch(
        index=spec.index, role=spec.role, npus=spec.npus, tp_size=tp_size, dp_size=dp_size,
        dp_size_local=dp_size_local, dp_rank_start=dp_rank_start, kv=kv, where=where,
        api_port=ints.get("api_port"),
        api_servers=dp_size_local if spec.external_dp else 1,
        dp_rpc_port=ints.get("dp_rpc_port"), dp_address=dp_address, dp_master=dp_master,
        external_dp=spec.external_dp, headless=headless, prefix_caching=prefix,
        num_speculative_tokens=spec_tokens, recompute_scheduler=recompute,
    )


def _json_flag(reader: _Reader, cmd: ServeCommand, flag: str, spec: _NodeInput) -> \
        tuple[dict[str, Any], Where] | None:
    token = cmd.value(flag)
    if token is None:
        return None
    at = Where(reader.file, token.line)
    if len(token.text) > MAX_JSON_CHARS:
        raise reader.fail(spec.path + (flag,), f"{len(token.text)} characters is more than "
                                               f"{MAX_JSON_CHARS}", token.line)
    try:
        value = parse_json(token.text, file=reader.file, what=f"{flag} JSON",
                           max_bytes=MAX_JSON_CHARS, inside=True)
    except InputError as err:
        raise reader.fail(spec.path + (flag,), err.reason, token.line) from None
    if not isinstance(value, dict):
        raise reader.fail(spec.path + (flag,), f"must be a JSON object, not "
                                               f"{excerpt(value)}", token.line)
    return value, at


def _key_line(reader: _Reader, key: str, at: Where, after: str | None = None) -> Where:
    """The line of `"key"` inside a JSON value that starts at AT (after `"after"`)."""
    start = at.line or 1
    last = min(len(reader.lines), start + 200)
    if after is not None:
        for number in range(start, last + 1):
            if f'"{after}"' in reader.lines[number - 1]:
                start = number
                break
    for number in range(start, last + 1):
        if f'"{key}"' in reader.lines[number - 1]:
            return Where(reader.file, number)
    return at


def _kv_transfer(reader: _Reader, cmd: ServeCommand, spec: _NodeInput,
                 where: dict[str, Where]) -> KvTransfer:
    found = _json_flag(reader, cmd, "--kv-transfer-config", spec)
    if found is None:
        raise reader.fail(spec.path, "a PD node needs --kv-transfer-config")
    config, at = found
    base: YamlPath = spec.path + ("kv_transfer_config",)

    def text_key(key: str, required: bool) -> str | None:
        if key not in config:
            if required:
                raise reader.fail(base, f"{key} is missing", at.line)
            return None
        value = config[key]
        if isinstance(value, int) and not isinstance(value, bool) and key == "engine_id":
            value = str(value)
        if not isinstance(value, str) or not value or len(value) > 200:
            raise reader.fail(base + (key,), f"must be non-empty text, not {excerpt(value)}",
                              _key_line(reader, key, at).line)
        return value

    connector = text_key("kv_connector", True) or ""
    kv_role = text_key("kv_role", True) or ""
    engine_id = text_key("engine_id", False)
    where["connector"] = _key_line(reader, "kv_connector", at)
    where["kv_role"] = _key_line(reader, "kv_role", at)
    where["engine_id"] = _key_line(reader, "engine_id", at) if engine_id else at
    if "kv_port" in config:
        where["kv_port"] = _key_line(reader, "kv_port", at)
        kv_port = reader.integer(config["kv_port"], base + ("kv_port",), minimum=1,
                                 line=where["kv_port"].line)
    else:
        where["kv_port"] = at
        kv_port = VLLM_DEFAULT_KV_PORT
    extra = config.get("kv_connector_extra_config", {})
    if not isinstance(extra, dict):
        raise reader.fail(base + ("kv_connector_extra_config",),
                          f"must be a JSON object, not {excerpt(extra)}",
                          _key_line(reader, "kv_connector_extra_config", at).line)
    sides: dict[str, ExtraLayout] = {}
    for side in ("prefill", "decode"):
        part = extra.get(side, {})
        side_path = base + ("kv_connector_extra_config", side)
        side_at = _key_line(reader, side, at)
        where[f"extra.{side}"] = side_at
        if not isinstance(part, dict):
            raise reader.fail(side_path, f"must be a JSON object, not {excerpt(part)}",
                              side_at.line)
        sizes: dict[str, int | None] = {}
        for key in ("dp_size", "tp_size"):
            sizes[key] = None if key not in part else reader.integer(
                part[key], side_path + (key,), minimum=1, maximum=4096,
                line=_key_line(reader, key, at, after=side).line)
        sides[side] = ExtraLayout(sizes["dp_size"], sizes["tp_size"])
    lookup = None
    if "lookup_rpc_port" in extra:
        lookup = reader.integer(extra["lookup_rpc_port"], base + ("lookup_rpc_port",),
                                line=_key_line(reader, "lookup_rpc_port", at).line)
    return KvTransfer(connector=connector, kv_role=kv_role, kv_port=kv_port,
                      engine_id=engine_id, prefill=sides["prefill"], decode=sides["decode"],
                      lookup_rpc_port=lookup)


def _speculative_tokens(reader: _Reader, cmd: ServeCommand, spec: _NodeInput,
                        where: dict[str, Where]) -> int | None:
    found = _json_flag(reader, cmd, "--speculative-config", spec)
    if found is None:
        return None
    config, at = found
    if "num_speculative_tokens" not in config:
        return None
    where["num_speculative_tokens"] = _key_line(reader, "num_speculative_tokens", at)
    return reader.integer(config["num_speculative_tokens"],
                          spec.path + ("speculative_config", "num_speculative_tokens"),
                          minimum=0, maximum=64, line=where["num_speculative_tokens"].line)


def _recompute_scheduler(reader: _Reader, cmd: ServeCommand, spec: _NodeInput,
                         where: dict[str, Where]) -> bool:
    """`recompute_scheduler_enable` in --additional-config, at the top or under
    `scheduler_config` (vllm_ascend/ascend_config.py reads both)."""
    found = _json_flag(reader, cmd, "--additional-config", spec)
    if found is None:
        return False
    config, at = found
    scheduler = config.get("scheduler_config")
    value = config.get("recompute_scheduler_enable")
    if value is None and isinstance(scheduler, dict):
        value = scheduler.get("recompute_scheduler_enable")
    if value is None:
        return False
    where["recompute_scheduler"] = _key_line(reader, "recompute_scheduler_enable", at)
    if not isinstance(value, bool):
        raise reader.fail(spec.path + ("additional_config", "recompute_scheduler_enable"),
                          f"must be true or false, not {excerpt(value)}",
                          where["recompute_scheduler"].line)
    return value


def _words(reader: _Reader, text: str, first: int | None, last: int, path: YamlPath,
           *, start: str | None = None) -> list[Token]:
    """The words of TEXT (from its `start` word on, e.g. `vllm`) located in the file."""
    words = split_command(text, file=reader.file, line=first, field=dotted(path))
    if start is not None:
        for index in range(len(words) - 1):
            if words[index] == start and words[index + 1] == "serve":
                words = words[index:]
                break
        else:
            raise reader.fail(path, f"no `{start} serve` command")
    return locate_words(words, reader.lines, first or 1, last)


def _block_end(reader: _Reader, path: YamlPath, siblings: int, index: int) -> int:
    """The last line of item INDEX of the list at PATH (the next item's line - 1)."""
    if index + 1 < siblings:
        nxt = reader.source.lines.get(path + (index + 1,))
        if nxt:
            return nxt - 1
    return len(reader.lines)


def _option_list(words: list[str], option: str) -> list[str]:
    """The words after OPTION up to the next option (argparse `nargs="+"`)."""
    if option not in words:
        return []
    values = []
    for word in words[words.index(option) + 1:]:
        if word.startswith("--"):
            break
        values.append(word)
    return values


def _first_line_with(reader: _Reader, needle: str, first: int | None, last: int) -> int | None:
    for number in range(first or 1, min(last, len(reader.lines)) + 1):
        if needle in reader.lines[number - 1]:
            return number
    return first


def _npus(reader: _Reader, root: dict[str, Any]) -> int:
    if "npu_per_node" not in root:
        raise reader.fail((), "npu_per_node is missing")
    return reader.integer(root["npu_per_node"], ("npu_per_node",), minimum=1,
                          maximum=MAX_NPUS_PER_NODE)


def _model(reader: _Reader, root: dict[str, Any]) -> str:
    if "model" not in root:
        raise reader.fail((), "model is missing")
    return reader.text(root["model"], ("model",))


def _role_map(reader: _Reader, groups: dict[str, Any], path: YamlPath,
              keys: Mapping[str, Role], count: int) -> dict[int, Role]:
    roles: dict[int, Role] = {}
    for key, role in keys.items():
        if key not in groups:
            raise reader.fail(path, f"{key} is missing")
        for position, raw in enumerate(reader.sequence(groups[key], path + (key,))):
            index = reader.integer(raw, path + (key, position), maximum=count - 1)
            if index in roles:
                raise reader.fail(path + (key, position), f"node {index} is listed as both "
                                                          f"{roles[index]} and {role}")
            roles[index] = role
    missing = [i for i in range(count) if i not in roles]
    if missing:
        raise reader.fail(path, f"nodes {missing} are neither prefill nor decode")
    return roles


def _layout(reader: _Reader, root: dict[str, Any], nodes: list[NodeLaunch],
            proxy: ProxySpec | None) -> PdLayout:
    if not any(n.role == "prefill" for n in nodes) or not any(n.role == "decode"
                                                              for n in nodes):
        raise reader.fail((), "a PD layout needs at least one prefill and one decode node")
    return PdLayout(file=reader.file, model=_model(reader, root), npu_per_node=_npus(reader, root),
                    nodes=tuple(nodes), where={"npu_per_node": reader.where(("npu_per_node",))},
                    proxy=proxy)


# ---- internal_dp: tests/e2e/*/multi_node/internal_dp/config/*.yaml ----

class _InternalDp:
    def __init__(self, reader: _Reader, root: dict[str, Any]):
        self.reader, self.root = reader, root

    def layout(self) -> PdLayout:
        reader, root = self.reader, self.root
        deployments = reader.sequence(root["deployment"], ("deployment",))
        if "disaggregated_prefill" not in root:
            raise reader.fail((), "disaggregated_prefill is missing (not a PD config)")
        groups = reader.mapping(root["disaggregated_prefill"], ("disaggregated_prefill",))
        roles = _role_map(reader, groups, ("disaggregated_prefill",),
                          {"prefiller_host_index": "prefill", "decoder_host_index": "decode"},
                          len(deployments))
        common = root.get("env_common") or {}
        reader.mapping(common, ("env_common",))
        decode_master = min(i for i, r in roles.items() if r == "decode")
        npus = _npus(reader, root)
        nodes = []
        for index, raw in enumerate(deployments):
            path: YamlPath = ("deployment", index)
            entry = reader.mapping(raw, path)
            envs = entry.get("envs") or {}
            reader.mapping(envs, path + ("envs",))
            if "server_cmd" not in entry:
                raise reader.fail(path, "server_cmd is missing")
            cmd_text = reader.text(entry["server_cmd"], path + ("server_cmd",))
            first = reader.source.line_of(path + ("server_cmd",))
            last = _block_end(reader, ("deployment",), len(deployments), index)
            words = _words(reader, cmd_text, first, last, path + ("server_cmd",), start="vllm")
            params = self._env_params(envs, common, path)
            role = roles[index]
            master = 0 if role == "prefill" else decode_master

            def resolve(text: str, own: int = index, master: int = master) -> int | None:
                name = placeholder(text)
                return own if name == "LOCAL_IP" else master if name == "MASTER_IP" else None

            nodes.append(_build_node(reader, _NodeInput(
                index=index, role=role, npus=npus, command=parse_serve(words),
                command_where=reader.where(path + ("server_cmd",)), params=params,
                external_dp=False, resolve_address=resolve, path=path)))
        return _layout(reader, root, nodes, self._proxy(common))

    def _env_params(self, envs: dict[str, Any], common: dict[str, Any],
                    path: YamlPath) -> dict[str, Value]:
        # `--port $SERVER_PORT`: the node's envs over env_common, else the harness default
        for source, at in ((envs, path + ("envs", "SERVER_PORT")),
                           (common, ("env_common", "SERVER_PORT"))):
            if "SERVER_PORT" in source:
                return {"api_port": Value(source["SERVER_PORT"], self.reader.where(at))}
        return {"api_port": Value(HARNESS_DEFAULT_SERVER_PORT, self.reader.where(path))}

    def _proxy(self, common: dict[str, Any]) -> ProxySpec:
        script = common.get("DISAGGREGATED_PREFILL_PROXY_SCRIPT", PROXY_P_FIRST)
        return ProxySpec(node=0, port=None, script=os.path.basename(str(script)),
                         where=self.reader.where(("disaggregated_prefill",)))


# ---- external_dp: tests/e2e/*/multi_node/external_dp/config/*.yaml ----

class _ExternalDp:
    def __init__(self, reader: _Reader, root: dict[str, Any]):
        self.reader, self.root = reader, root

    def layout(self) -> PdLayout:
        reader, root = self.reader, self.root
        for key in ("config", "routing"):
            if key not in root:
                raise reader.fail((), f"{key} is missing")
        configs = reader.sequence(root["config"], ("config",))
        templates = reader.sequence(root["templates"], ("templates",))
        routing = reader.mapping(root["routing"], ("routing",))
        groups = reader.mapping(routing.get("groups"), ("routing", "groups"))
        roles = _role_map(reader, groups, ("routing", "groups"),
                          {"prefiller": "prefill", "decoder": "decode"}, len(configs))
        by_index: dict[int, int] = {}
        for position, raw in enumerate(templates):
            entry = reader.mapping(raw, ("templates", position))
            index = reader.integer(entry.get("node_index"), ("templates", position,
                                                             "node_index"),
                                   maximum=len(configs) - 1)
            if index in by_index:
                raise reader.fail(("templates", position, "node_index"),
                                  f"node {index} has two templates")
            by_index[index] = position
        npus = _npus(reader, root)
        nodes = []
        for index, raw in enumerate(configs):
            path: YamlPath = ("config", index)
            entry = reader.mapping(raw, path)
            if index not in by_index:
                raise reader.fail(path, f"node {index} has no entry in templates")
            params = {EXTERNAL_NODE_FIELDS[key]: Value(entry[key], reader.where(path + (key,)))
                      for key in EXTERNAL_NODE_FIELDS if key in entry}
            tpath: YamlPath = ("templates", by_index[index])
            template = reader.mapping(templates[by_index[index]], tpath)
            argv = reader.sequence(template.get("server_cmd_template"),
                                   tpath + ("server_cmd_template",), limit=2000)
            words = [Token(reader.text(word, tpath + ("server_cmd_template", i)),
                           reader.source.line_of(tpath + ("server_cmd_template", i)))
                     for i, word in enumerate(argv)]

            def resolve(text: str, own: int = index) -> int | None:
                match = _NODE_IP.fullmatch(text.strip())
                if match:
                    return int(match.group(1))
                return own if placeholder(text) == "LOCAL_IP" else None

            nodes.append(_build_node(reader, _NodeInput(
                index=index, role=roles[index], npus=npus, command=parse_serve(words),
                command_where=reader.where(tpath), params=params, external_dp=True,
                resolve_address=resolve, path=path)))
        proxy = ProxySpec(node=0, port=HARNESS_EXTERNAL_PROXY_PORT, script=PROXY_P_FIRST,
                          where=reader.where(("routing",)))
        return _layout(reader, root, nodes, proxy)


# ---- docs recipe kept as data ----

class _Recipe:
    def __init__(self, reader: _Reader, root: dict[str, Any]):
        self.reader, self.root = reader, root

    def layout(self) -> PdLayout:
        reader, root = self.reader, self.root
        entries = reader.sequence(root["nodes"], ("nodes",))
        npus = _npus(reader, root)
        scripts = []
        for index, raw in enumerate(entries):
            path: YamlPath = ("nodes", index)
            entry = reader.mapping(raw, path)
            for key in ("role", "script"):
                if key not in entry:
                    raise reader.fail(path, f"{key} is missing")
            role_text = reader.text(entry["role"], path + ("role",))
            if role_text not in ("prefill", "decode"):
                raise reader.fail(path + ("role",), f"must be prefill or decode, not "
                                                    f"{excerpt(role_text)}")
            scripts.append((entry, reader.text(entry["script"], path + ("script",))))
        own_ip = {}
        for index, (_, script) in enumerate(scripts):
            match = _LOCAL_IP_ASSIGN.search(script)
            if match and not match.group(1).startswith("x"):
                own_ip[match.group(1)] = index
        nodes = []
        for index, (entry, script) in enumerate(scripts):
            path = ("nodes", index)
            role: Role = "prefill" if entry["role"] == "prefill" else "decode"
            first = reader.source.line_of(path + ("script",))
            last = _block_end(reader, ("nodes",), len(entries), index)
            words = _words(reader, script, first, last, path + ("script",), start="vllm")
            params: dict[str, Value] = {}
            if "launch" in entry:
                params = self._launch(entry["launch"], path + ("launch",))
            same_role = [i for i, (e, _) in enumerate(scripts) if e["role"] == entry["role"]]
            node_npus = self._visible_devices(script, npus)
            npus_where = None
            if _VISIBLE.search(script):
                npus_where = Where(reader.file, _first_line_with(
                    reader, "ASCEND_RT_VISIBLE_DEVICES=", first, last))

            def resolve(text: str, own: int = index, first_of_role: int = same_role[0]) \
                    -> int | None:
                name = placeholder(text)
                if name in ("IP_ADDRESS", "local_ip"):
                    return own
                if name == "MASTER_IP_ADDRESS":
                    # "node0_ip must be consistent with local_ip on the first decode node"
                    return first_of_role
                return own_ip.get(text.strip())

            nodes.append(_build_node(reader, _NodeInput(
                index=index, role=role, npus=node_npus, command=parse_serve(words),
                command_where=reader.where(path + ("script",)), params=params,
                external_dp="launch" in entry, resolve_address=resolve, path=path,
                npus_where=npus_where)))
        roles: list[Role] = [n.role for n in nodes]
        return _layout(reader, root, nodes, self._proxy(roles, own_ip))

    def _visible_devices(self, script: str, default: int) -> int:
        match = _VISIBLE.search(script)
        return len(match.group(1).split(",")) if match else default

    def _launch(self, raw: Any, path: YamlPath) -> dict[str, Value]:
        reader = self.reader
        text = reader.text(raw, path)
        at = reader.where(path)
        words = split_command(text, file=reader.file, line=at.line, field=dotted(path))
        params: dict[str, Value] = {}
        for position, word in enumerate(words[:-1]):
            if word in LAUNCH_FIELDS:
                params[LAUNCH_FIELDS[word]] = Value(words[position + 1], at)
        # launch_online_dp.py: --dp-size-local -1 (its default) means dp-size
        if params.get("dp_size_local", Value("-1", at)).raw == "-1" and "dp_size" in params:
            params["dp_size_local"] = Value(params["dp_size"].raw, at)
        return params

    def _proxy(self, roles: list[Role], own_ip: dict[str, int]) -> ProxySpec | None:
        reader, root = self.reader, self.root
        if "proxy" not in root:
            return None
        entry = reader.mapping(root["proxy"], ("proxy",))
        command = reader.text(entry.get("command"), ("proxy", "command"))
        at = reader.where(("proxy", "command"))
        words = split_command(command, file=reader.file, line=at.line,
                              field="proxy.command")
        scripts = [w for w in words if w.endswith(".py")]
        if not scripts:
            raise reader.fail(("proxy", "command"), "no proxy script (*.py) in the command")
        port = None
        if "--port" in words[:-1]:
            port = reader.integer(words[words.index("--port") + 1], ("proxy", "command"),
                                  minimum=1)
        node = reader.integer(entry.get("node", 0), ("proxy", "node"), maximum=MAX_NODES)
        backends: list[ProxyBackend] = []
        sides: tuple[tuple[Role, str], ...] = (("prefill", "prefiller"), ("decode", "decoder"))
        for role, side in sides:
            backends += self._backends(words, role, side, roles, own_ip, at)
        return ProxySpec(node=node, port=port, script=os.path.basename(scripts[0]), where=at,
                         backends=tuple(backends))

    def _backends(self, words: list[str], role: Role, side: str, roles: list[Role],
                  own_ip: dict[str, int], at: Where) -> list[ProxyBackend]:
        """`--<side>-hosts` zipped with `--<side>-ports` (the proxy refuses unequal counts).
        A host is the node whose script sets it as local_ip; hosts that are placeholders
        (`141.xx.xx.2`) are the side's nodes in order when there are as many of them."""
        reader = self.reader
        hosts = _option_list(words, f"--{side}-hosts")
        ports = _option_list(words, f"--{side}-ports")
        if len(hosts) != len(ports):
            raise reader.fail(("proxy", "command"), f"{len(hosts)} {side} hosts but "
                                                    f"{len(ports)} ports: the proxy refuses "
                                                    "that", at.line)
        line = _first_line_with(reader, f"--{side}-ports", at.line,
                                at.line + 400 if at.line else 1)
        side_nodes = [i for i, r in enumerate(roles) if r == role]
        distinct = list(dict.fromkeys(h for h in hosts if h not in own_ip))
        by_order = dict(zip(distinct, side_nodes)) if len(distinct) == len(side_nodes) else {}
        return [ProxyBackend(role=role, host=host,
                             port=reader.integer(port, ("proxy", "command"), minimum=1,
                                                 line=line),
                             node=own_ip.get(host, by_order.get(host)),
                             where=Where(reader.file, line))
                for host, port in zip(hosts, ports)]
