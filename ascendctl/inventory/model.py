"""The inventory's sections, validated strictly (unknown keys are errors)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from ascendctl.inventory import validators as check

# kept for callers that test names: always used with fullmatch
NAME_RE = check.NAME_PATTERN
ENV_NAME_RE = check.ENV_NAME_PATTERN
# upper bounds that keep arithmetic finite (the planner multiplies these)
MAX_TOKENS = 1 << 24

CHIP_HBM_GIB = {
    "910B1": 64, "910B2": 64, "910B2C": 64, "910B3": 64, "910B4": 32,
    "Ascend910_93": 64,
}
A3_CHIPS = {"Ascend910_93"}


class Section(BaseModel):
    # strict: `rank: yes` is a boolean, not 1; no .inf/.nan for timeouts and limits
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True,
                              strict=True, allow_inf_nan=False)


def _safe_path(value: str) -> str:
    """Paths may hold spaces, quotes or shell metacharacters (they are always quoted),
    but never control characters (a newline would split unit and environment files)
    and never a leading dash (an option to ssh, rsync or ln)."""
    return check.path(value)


IPv4 = Annotated[str, AfterValidator(check.unicast_ipv4)]


class RoceSpec(Section):
    netmask: str = "255.255.255.0"
    mtu: Optional[int] = Field(default=None, ge=576, le=9600)
    tls: Optional[bool] = None
    gateway: Optional[str] = None
    netdetect: Optional[str] = None

    @field_validator("netmask")
    @classmethod
    def _netmask(cls, value: str) -> str:
        return check.netmask(value)

    @field_validator("gateway", "netdetect")
    @classmethod
    def _addr(cls, value: Optional[str]) -> Optional[str]:
        return None if value is None else check.unicast_ipv4(value)


class ClusterSpec(Section):
    name: str
    chip: Literal["910B1", "910B2", "910B2C", "910B3", "910B4", "Ascend910_93"] = "910B3"
    npus_per_node: int = Field(default=8, ge=1, le=16)
    hbm_gib: Optional[int] = Field(default=None, ge=1, le=256)
    roce: RoceSpec = RoceSpec()

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check.name(value)

    @property
    def hbm_per_npu_gib(self) -> int:
        return self.hbm_gib or CHIP_HBM_GIB[self.chip]

    @property
    def is_a3(self) -> bool:
        return self.chip in A3_CHIPS


class SshSpec(Section):
    user: str = "root"
    port: int = Field(default=22, ge=1, le=65535)
    private_key: Optional[str] = None
    known_hosts: str = "~/.ssh/known_hosts"
    host_key_checking: Literal["strict", "accept-new"] = "strict"
    jump_host: Optional[str] = None
    connect_timeout: float = Field(default=10, gt=0, le=600)
    connect_retries: int = Field(default=2, ge=0, le=10)
    command_timeout: float = Field(default=600, gt=0, le=86400)
    become: Optional[bool] = None  # None: sudo exactly when user is not root

    @field_validator("user")
    @classmethod
    def _user(cls, value: str) -> str:
        return check.user(value)

    @field_validator("private_key")
    @classmethod
    def _paths(cls, value: Optional[str]) -> Optional[str]:
        return None if value is None else _safe_path(value)

    @field_validator("known_hosts")
    @classmethod
    def _known_hosts(cls, value: str) -> str:
        # OpenSSH reads UserKnownHostsFile as a space-separated list of files
        _safe_path(value)
        if any(ch.isspace() for ch in value):
            raise ValueError("must not contain spaces (OpenSSH would read it as several "
                             "files)")
        return value

    @field_validator("jump_host")
    @classmethod
    def _jump(cls, value: Optional[str]) -> Optional[str]:
        return None if value is None else check.jump_host(value)

    @property
    def uses_sudo(self) -> bool:
        return self.user != "root" if self.become is None else self.become


class SecretRef(Section):
    """Where a secret comes from: an environment variable or a file on the jump host."""

    env: Optional[str] = None
    file: Optional[str] = None

    @model_validator(mode="after")
    def _exactly_one(self) -> "SecretRef":
        if (self.env is None) == (self.file is None):
            raise ValueError("give exactly one of `env` or `file`")
        if self.env is not None and not ENV_NAME_RE.fullmatch(self.env):
            # never echo the value: someone may have pasted the key itself here
            raise ValueError("env must name an environment variable (letters, digits, _)")
        if self.file is not None:
            _safe_path(self.file)
        return self

    def describe(self) -> str:
        return f"env:{self.env}" if self.env else f"file:{self.file}"


class ModelSpec(Section):
    name: Optional[str] = None
    source: Optional[str] = None   # weights on the jump host, pushed by `ascendctl weights push`
    path: Optional[str] = None     # weights already on every node (shared storage); no push
    config: Optional[str] = None
    builtin_config: Optional[str] = None
    dtype: Literal["bfloat16", "float16", "auto"] = "bfloat16"
    quantization: Literal["none", "w8a8", "w4a8", "fp8"] = "none"
    served_name: Optional[str] = None
    trust_remote_code: bool = False

    @field_validator("source", "config")
    @classmethod
    def _paths(cls, value: Optional[str]) -> Optional[str]:
        return None if value is None else _safe_path(value)

    @field_validator("path")
    @classmethod
    def _node_path(cls, value: Optional[str]) -> Optional[str]:
        # the release's model link points here (`ln -sfnT -- PATH model`)
        return None if value is None else check.absolute_path(value)

    @field_validator("name", "builtin_config")
    @classmethod
    def _text(cls, value: Optional[str]) -> Optional[str]:
        return None if value is None else check.safe_token(value)

    @field_validator("served_name")
    @classmethod
    def _served(cls, value: Optional[str]) -> Optional[str]:
        return None if value is None else check.served_name(value)

    @model_validator(mode="after")
    def _one_location(self) -> "ModelSpec":
        if (self.source is None) == (self.path is None):
            raise ValueError("give exactly one of `source` (pushed from the jump host) "
                             "or `path` (already on every node)")
        return self


class ProxySpec(Section):
    """nginx in front of the serving groups' heads (templates/nginx/ascendctl.conf.j2)."""

    enabled: bool = False
    port: int = Field(default=8080, ge=1, le=65535)
    gateway: Optional[str] = None   # the host running nginx; default: the first group's head

    @field_validator("gateway")
    @classmethod
    def _gateway(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not NAME_RE.fullmatch(value):
            raise ValueError("must be a host name of this inventory")
        return value


class HealthSpec(Section):
    """Gang recovery on the nodes (docs/health.md): the deep probe and the restart policy."""

    supervise: bool = True                   # run the gang supervisor on the head
    probe_interval_s: float = Field(default=5, ge=1, le=600)
    probe_timeout_s: float = Field(default=10, ge=1, le=600)
    probe_failure_s: float = Field(default=30, ge=5, le=86400)   # failing this long: restart
    max_attempts: int = Field(default=3, ge=1, le=100)
    backoff_s: float = Field(default=10, ge=0, le=3600)          # doubles per attempt
    backoff_max_s: float = Field(default=300, ge=0, le=86400)
    stop_grace_s: float = Field(default=15, ge=1, le=600)        # SIGTERM, then SIGKILL
    npu_free_timeout_s: float = Field(default=120, ge=5, le=3600)
    stable_s: float = Field(default=600, ge=0, le=86400)         # serving this long: attempts reset
    token: Optional[SecretRef] = None        # signs the plan; default: derived from api_key
    # hardware faults (docs/faults.md): the site's policy file merged over the defaults
    # (relative to the inventory's directory), and how often each node reads its signals
    fault_policy: Optional[str] = Field(default=None, min_length=1, max_length=4096)
    fault_interval_s: float = Field(default=10, ge=1, le=3600)


class EngineArgsSection(Section):
    """A section that passes `extra_args` and `env` to the engine (`serving:`, and each side
    of `pd:`): the checks both fields get wherever they are set. The subclass declares the
    fields (and their place in the section)."""

    @field_validator("extra_args", check_fields=False)
    @classmethod
    def _args(cls, value: list[str]) -> list[str]:
        # flags for `vllm serve` (after the model operand): dashes are the point here
        for arg in value:
            check.text(arg)
        return value

    @field_validator("env", mode="before", check_fields=False)
    @classmethod
    def _env(cls, value: Any) -> Any:
        return check.environment(value) if isinstance(value, dict) else value


class ServingSpec(EngineArgsSection):
    mode: Literal["dp", "mp", "ray"] = "mp"
    port: int = Field(default=8000, ge=1, le=65535)
    tensor_parallel_size: int = Field(default=1, ge=1, le=128)
    pipeline_parallel_size: int = Field(default=1, ge=1, le=64)
    data_parallel_size: int = Field(default=1, ge=1, le=256)
    data_parallel_size_local: Optional[int] = Field(default=None, ge=1, le=16)
    enable_expert_parallel: bool = False
    api_server_count: Optional[int] = Field(default=None, ge=1, le=64)
    data_parallel_rpc_port: int = Field(default=29550, ge=1, le=65535)
    master_port: int = Field(default=29501, ge=1, le=65535)
    ray_port: int = Field(default=6379, ge=1, le=65535)
    max_model_len: int = Field(default=32768, ge=16, le=MAX_TOKENS)
    max_num_seqs: int = Field(default=16, ge=1, le=65536)
    max_num_batched_tokens: Optional[int] = Field(default=None, ge=16, le=MAX_TOKENS)
    gpu_memory_utilization: float = Field(default=0.9, gt=0.05, le=0.99)
    enable_prefix_caching: Optional[bool] = None
    speculative_config: Optional[dict[str, Any]] = None
    compilation_config: Optional[dict[str, Any]] = None
    additional_config: Optional[dict[str, Any]] = None
    enforce_eager: bool = False
    extra_args: list[str] = []
    env: dict[str, Any] = {}
    engine: str = "vllm"
    api_key: Optional[SecretRef] = None
    hccl_connect_timeout: int = Field(default=600, ge=30, le=86400)
    hccl_exec_timeout: int = Field(default=1836, ge=30, le=86400)
    startup_timeout: int = Field(default=1800, ge=10, le=86400)
    hbm_watchdog_threshold: float = Field(default=0.97, gt=0.5, le=1.0)
    proxy: ProxySpec = ProxySpec()
    # vllm-ascend reads no rank table on its MP/DP/Ray launch paths (the LLMDataDist
    # connector and gen_ranktable were removed in Dec 2025, vllm-ascend PR #4941): hccl.json
    # is rendered for HCCL tests and MindIE, and RANK_TABLE_FILE reaches the engine's
    # environment only when this is true (e.g. for a plugin that still reads it).
    export_rank_table: bool = False
    health: HealthSpec = HealthSpec()

    @field_validator("engine")
    @classmethod
    def _engine(cls, value: str) -> str:
        return check.executable(value)

    @property
    def dp_local(self) -> int:
        return self.data_parallel_size_local or 1


class VersionsSpec(Section):
    driver: Optional[str] = None
    firmware: Optional[str] = None
    cann: Optional[str] = None
    python: Optional[str] = None
    torch: Optional[str] = None
    torch_npu: Optional[str] = None
    vllm: Optional[str] = None
    vllm_ascend: Optional[str] = None

    # versions are text: YAML reads an unquoted 3.10 as the float 3.1, so a number is
    # refused (strict), and the loader's message shows how to quote what was written
    @field_validator("*")
    @classmethod
    def _version(cls, value: Optional[str]) -> Optional[str]:
        return None if value is None else check.version(value)


class RollingSpec(Section):
    """How a changed release reaches several serving groups (docs/replicas.md)."""

    max_unavailable: int = Field(default=1, ge=1, le=1024)   # groups switched at once
    drain_timeout: float = Field(default=600, ge=0, le=86400)  # in-flight requests may take
    bench: bool = False            # after the quality gate, a short bench against `slo`


class DeploySpec(Section):
    root: str = "/var/lib/ascendctl"
    keep_releases: int = Field(default=5, ge=1, le=100)
    python: str = "/usr/bin/python3"   # the nodes' interpreter for the runtime (stdlib only)
    exporter_port: int = Field(default=9101, ge=1, le=65535)
    rolling: RollingSpec = RollingSpec()

    @field_validator("root")
    @classmethod
    def _root(cls, value: str) -> str:
        return check.deploy_root(value)

    @field_validator("python")
    @classmethod
    def _absolute(cls, value: str) -> str:
        return check.absolute_path(value)


from ascendctl.inventory.quality import QualitySpec  # noqa: E402 (it builds on Section)
from ascendctl.inventory.promotion import PromotionSpec  # noqa: E402 (it builds on Section)


class SloSpec(Section):
    min_output_tokens_per_s_per_npu: Optional[float] = Field(default=None, gt=0)
    max_p99_ttft_ms: Optional[float] = Field(default=None, gt=0)
    max_p99_tpot_ms: Optional[float] = Field(default=None, gt=0)
    quality: Optional[QualitySpec] = None   # the quality gate (ascendctl/inventory/quality.py)
    promotion: Optional[PromotionSpec] = None   # evidence gates (ascendctl/inventory/promotion.py)


class HostSpec(Section):
    ansible_host: str
    rank: int = Field(ge=0, le=4095)
    ip: Optional[str] = None
    nic: Optional[str] = None
    device_ips: Optional[list[IPv4]] = None
    super_pod_id: Optional[int] = Field(default=None, ge=0)
    super_device_ids: Optional[list[int]] = None
    ansible_user: Optional[str] = None
    ansible_port: Optional[int] = Field(default=None, ge=1, le=65535)
    ansible_ssh_private_key_file: Optional[str] = None
    ssh: Optional[dict[str, Any]] = None   # validated as SshSpec after merging
    env: dict[str, Any] = {}               # engine environment for this host only
    numa_node: Optional[int] = Field(default=None, ge=0, le=63)  # launcher binds memory+CPUs
    cpus: Optional[str] = None             # CPU list for the engine, e.g. "0-23,48-71"
    custom: dict[str, Any] = {}

    @field_validator("cpus")
    @classmethod
    def _cpus(cls, value: Optional[str]) -> Optional[str]:
        return None if value is None else check.cpu_list(value)

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, value: Any) -> Any:
        return check.environment(value) if isinstance(value, dict) else value

    @field_validator("ansible_host", mode="before")
    @classmethod
    def _address_is_text(cls, value: Any) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            raise ValueError("YAML read the address as a number (unquoted, 1:2:3:4:5:6:7:8 is "
                             'a base-60 integer in YAML 1.1): quote it, ansible_host: "..."')
        return value

    @field_validator("ansible_host")
    @classmethod
    def _address(cls, value: str) -> str:
        return check.host(value)

    @field_validator("ip")
    @classmethod
    def _ip(cls, value: Optional[str]) -> Optional[str]:
        return None if value is None else check.unicast_ipv4(value)

    @field_validator("nic")
    @classmethod
    def _nic(cls, value: Optional[str]) -> Optional[str]:
        return None if value is None else check.nic(value)

    @field_validator("ansible_user")
    @classmethod
    def _login(cls, value: Optional[str]) -> Optional[str]:
        return None if value is None else check.user(value)

    @field_validator("ansible_ssh_private_key_file")
    @classmethod
    def _key(cls, value: Optional[str]) -> Optional[str]:
        return None if value is None else _safe_path(value)
