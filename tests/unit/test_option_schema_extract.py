"""scripts/optionschema reads option strings, additional_config keys and environment
variables from source trees with ast: here from small sdists written the way vLLM and
vllm-ascend write theirs (the real ones are downloaded by scripts/extract_option_schema.py;
on vLLM 0.32.0 the reader gives exactly tests/fixtures/vllm_serve_options_0.32.0.txt)."""

from __future__ import annotations

import io
import tarfile
import textwrap
from pathlib import Path

from scripts.optionschema import ascend, docs, envs, vllm_args
from scripts.optionschema.sources import SourceTree

VLLM = {
    "vllm/entrypoints/openai/cli_args.py": '''
        @config
        class BaseFrontendArgs:
            chat_template: str | None = None
            enable_auto_tool_choice: bool = False

            @classmethod
            def _customize_cli_kwargs(cls, frontend_kwargs):
                frontend_kwargs["chat_template"]["flags"] = ["-ct"]
                return frontend_kwargs

            @classmethod
            def add_cli_args(cls, parser):
                frontend_kwargs = get_kwargs(cls)
                frontend_group = parser.add_argument_group(title="x")
                for key, value in frontend_kwargs.items():
                    extra_flags = value.pop("flags", [])
                    frontend_group.add_argument(*extra_flags, f"--{key.replace('_', '-')}", **value)
                return parser

        @config
        class FrontendArgs(BaseFrontendArgs):
            port: int = 8000
            allowed_origins: ClassVar[list[str]] = []

        def make_arg_parser(parser):
            parser.add_argument("model_tag", type=str, nargs="?")
            parser.add_argument("--headless", action="store_true", default=False)
            parser.add_argument("--api-server-count", "-asc", type=int, default=None)
            parser = FrontendArgs.add_cli_args(parser)
            parser = AsyncEngineArgs.add_cli_args(parser)
            return parser
    ''',
    "vllm/engine/arg_utils.py": '''
        def _compute_kwargs(cls):
            if type_hints == {bool, str, type(None)}:
                pass

        class EngineArgs:
            @staticmethod
            def add_cli_args(parser):
                model_kwargs = get_kwargs(ModelConfig)
                group = parser.add_argument_group(title="model")
                group.add_argument("--enforce-eager", **model_kwargs["enforce_eager"])
                group.add_argument("--hf-token", **model_kwargs["hf_token"])
                group.add_argument("--max-model-len", **model_kwargs["max_model_len"])
                group.add_argument("--enable-prefix-caching",
                                   **{**model_kwargs["enable_prefix_caching"], "default": None})
                group.add_argument("--speculative-config", "-sc", **model_kwargs["speculative"])
                group.add_argument("--old-flag", action="store_true", deprecated=True)
                return parser

        class AsyncEngineArgs(EngineArgs):
            @staticmethod
            def add_cli_args(parser, async_args_only=False):
                if not async_args_only:
                    parser = EngineArgs.add_cli_args(parser)
                parser.add_argument("--enable-log-requests",
                                    action=argparse.BooleanOptionalAction, default=False)
                return parser
    ''',
    "vllm/config/model.py": '''
        @config
        class SpeculativeConfig:
            enabled: bool = False

        @config
        class ModelConfig:
            enforce_eager: bool = False
            hf_token: bool | str | None = None
            max_model_len: int = 0
            enable_prefix_caching: Optional[bool] = None
            speculative: SpeculativeConfig | bool | None = None
    ''',
    "vllm/utils/argparse_utils.py": '''
        class FlexibleArgumentParser(ArgumentParser):
            def parse_args(self, args):
                for arg in args:
                    if arg.startswith("-O") and arg != "-O":
                        pass
    ''',
    "vllm/envs.py": '''
        environment_variables: dict[str, Callable[[], Any]] = {
            "VLLM_HOST_IP": lambda: os.getenv("VLLM_HOST_IP", ""),
            "VLLM_RPC_TIMEOUT": lambda: int(os.getenv("VLLM_RPC_TIMEOUT", "10000")),
        }
        environment_variables["VLLM_LATE"] = lambda: None
    ''',
}

ASCEND_READS = {
    "vllm_ascend/ascend_config.py": '''
        class AscendConfig:
            def __init__(self, vllm_config):
                additional_config = vllm_config.additional_config if vllm_config.additional_config is not None else {}
                self.a = additional_config.get("enable_cpu_binding", True)
                sub = additional_config.get("eplb_config", {})
                self.b = sub.get("not_top_level")
                self.c = self._value(additional_config, "enable_flashcomm1", "VLLM_ASCEND_X")
                if "enable_dsa_cp" in additional_config:
                    pass
    ''',
    "vllm_ascend/utils.py": '''
        def enable_sp(vllm_config):
            config = getattr(vllm_config, "additional_config", None) or {}
            return config.get("refresh") or os.environ.get("ASCEND_DIRECT") or os.getenv("HCCL_X")
    ''',
    "vllm_ascend/envs.py": '''
        env_variables = {"VLLM_ASCEND_ENABLE_NZ": lambda: os.getenv("VLLM_ASCEND_ENABLE_NZ")}
    ''',
    "docs/source/tutorials/models/Model.md": '''
        Run:

        ```bash
        export HCCL_BUFFSIZE=1024 VLLM_ASCEND_ENABLE_NZ=1
        OMP_NUM_THREADS=1 vllm serve /models/m \\
          --tensor-parallel-size 8 \\
          --additional-config '{"enable_cpu_binding": true,
            "enable_dsa_cp": false}' > log.txt 2>&1 &
        ```
    ''',
}

ASCEND_DATACLASS = {
    "vllm_ascend/config_utils.py": '''
        def config(cls=None, *, config=None, **kwargs):
            merged_config = ConfigDict(extra="forbid")
    ''',
    "vllm_ascend/ascend_config.py": '''
        @config
        class FinegrainedTPConfig:
            oproj_tensor_parallel_size: int = 0
            _private: int = 0

        @config
        class AscendConfig:
            model_config = ConfigDict(extra="forbid")
            enable_cpu_binding: bool = True
            finegrained_tp_config: FinegrainedTPConfig = dataclasses.field(default_factory=FinegrainedTPConfig)
            derived: int = dataclasses.field(default=0, init=False)
            _state: int = 0

        def init_ascend_config(vllm_config):
            _NON_USER_INPUT_KEYS = {"refresh", "enable_flashcomm1", "_internal"}
    ''',
}


def sdist(tmp_path: Path, name: str, files: dict[str, str]) -> SourceTree:
    path = tmp_path / f"{name}.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for member, text in files.items():
            data = textwrap.dedent(text).encode()
            info = tarfile.TarInfo(f"{name}/{member}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return SourceTree(path)


def test_serve_options_follow_make_arg_parser_and_get_kwargs(tmp_path):
    tree = sdist(tmp_path, "vllm-9.9.9", VLLM)
    options = vllm_args.serve_options(tree)
    assert options.flags == {
        "-h", "--help", "--headless", "--api-server-count", "-asc",
        # FrontendArgs fields (inherited too), the extra -ct, --no- for the bool field
        "--chat-template", "-ct", "--enable-auto-tool-choice", "--no-enable-auto-tool-choice",
        "--port",
        # EngineArgs: bool fields get --no-, also through a dict display; a dataclass
        # type wins over bool; `bool | str | None` is an optional-valued flag
        "--enforce-eager", "--no-enforce-eager", "--hf-token", "--max-model-len",
        "--enable-prefix-caching", "--no-enable-prefix-caching", "--speculative-config", "-sc",
        "--old-flag", "--enable-log-requests", "--no-enable-log-requests",
    }
    assert options.deprecated == {"--old-flag"}
    assert options.unresolved == []
    assert vllm_args.parser_features(tree) == {"allow_abbrev": True, "dash_o": True}
    assert envs.registry(tree, "vllm/envs.py", "environment_variables") == {
        "VLLM_HOST_IP", "VLLM_RPC_TIMEOUT", "VLLM_LATE"}


def test_additional_config_keys_read_with_get_are_ignored_when_unknown(tmp_path):
    tree = sdist(tmp_path, "vllm_ascend-0.20.0", ASCEND_READS)
    config = ascend.additional_config(tree)
    assert config.keys == {"enable_cpu_binding", "eplb_config", "enable_flashcomm1",
                           "enable_dsa_cp", "refresh"}
    assert (config.unknown, config.nested) == ("ignored", set())
    assert envs.direct_reads(tree, "vllm_ascend/") == {"ASCEND_DIRECT", "HCCL_X",
                                                       "VLLM_ASCEND_ENABLE_NZ"}


def test_a_forbidding_dataclass_refuses_unknown_keys(tmp_path):
    tree = sdist(tmp_path, "vllm_ascend-0.30.0", ASCEND_DATACLASS)
    config = ascend.additional_config(tree)
    assert config.keys == {"enable_cpu_binding", "finegrained_tp_config", "refresh",
                           "enable_flashcomm1"}
    assert config.nested == {"finegrained_tp_config.oproj_tensor_parallel_size"}
    assert (config.unknown, config.source) == ("refused", "vllm_ascend/config_utils.py:3")


def test_tutorial_commands_and_exports(tmp_path):
    tree = sdist(tmp_path, "vllm_ascend-0.20.0", ASCEND_READS)
    [page] = docs.tutorials(tree)
    [command] = page["commands"]
    assert command["argv"] == ["/models/m", "--tensor-parallel-size", "8", "--additional-config",
                               '{"enable_cpu_binding": true,\n    "enable_dsa_cp": false}']
    assert [e["name"] for e in page["env"]] == ["HCCL_BUFFSIZE", "OMP_NUM_THREADS",
                                                "VLLM_ASCEND_ENABLE_NZ"]
