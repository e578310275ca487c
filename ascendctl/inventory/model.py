"""The inventory's sections, validated strictly (unknown keys are errors)."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Literal, Optional

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
NIC_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,14}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

CHIP_HBM_GIB = {
    "910B1": 64, "910B2": 64, "910B2C": 64, "910B3": 64, "910B4": 32,
    "Ascend910_93": 64,
}
A3_CHIPS = {"Ascend910_93"}


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _safe_path(value: str) -> str:
    """Paths may hold spaces, quotes or shell metacharacters (they are always quoted),
    but never control characters: a newline would split unit and environment files."""
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ValueError("must not contain newlines or control characters")
    if not value:
        raise ValueError("must not be empty")
    return value


def _ipv4(value: str) -> str:
    try:
        return str(ipaddress.IPv4Address(value))
    except ValueError:
        raise ValueError(f"{value!r} is not an IPv4 address") from None


IPv4 = Annotated[str, AfterValidator(_ipv4)]


def _check_env(value: dict[str, str]) -> dict[str, str]:
    for key, val in value.items():
        if not ENV_NAME_RE.match(key):
            raise ValueError(f"{key!r} is not an environment variable name")
        if any(ord(ch) < 32 for ch in str(val)):
            raise ValueError(f"{key}: values must not contain newlines or control characters")
    return {key: str(val) for key, val in value.items()}


class RoceSpec(Section):
    netmask: str = "255.255.255.0"
    mtu: Optional[int] = Field(default=None, ge=576, le=9600)
    tls: Optional[bool] = None
    gateway: Optional[str] = None
    netdetect: Optional[str] = None

    @field_validator("netmask")
    @classmethod
    def _netmask(cls, value: str) -> str:
        try:
            ipaddress.IPv4Network(f"0.0.0.0/{value}")
        except ValueError:
            raise ValueError(f"{value!r} is not a netmask") from None
        return value

    @field_validator("gateway", "netdetect")
    @classmethod
    def _addr(cls, value: Optional[str]) -> Optional[str]:
        return None if value is None else _ipv4(value)


class ClusterSpec(Section):
    name: str
    chip: Literal["910B1", "910B2", "910B2C", "910B3", "910B4", "Ascend910_93"] = "910B3"
    npus_per_node: int = Field(default=8, ge=1, le=16)
    hbm_gib: Optional[int] = Field(default=None, ge=1, le=256)
    roce: RoceSpec = RoceSpec()

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME_RE.match(value):
            raise ValueError("use letters, digits, '.', '_' or '-' (at most 63)")
        return value

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
    command_timeout: float = Field(default=600, gt=0)
    become: Optional[bool] = None  # None: sudo exactly when user is not root

    @field_validator("user")
    @classmethod
    def _user(cls, value: str) -> str:
        if not re.match(r"^[a-z_][a-z0-9_.-]{0,31}$", value):
            raise ValueError("not a valid user name")
        return value

    @field_validator("private_key", "known_hosts")
    @classmethod
    def _paths(cls, value: Optional[str]) -> Optional[str]:
        return None if value is None else _safe_path(value)

    @field_validator("jump_host")
    @classmethod
    def _jump(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not re.match(r"^([A-Za-z0-9_.-]+@)?[A-Za-z0-9_.:\[\]-]+$", value):
            raise ValueError("use [user@]host[:port]")
        return value

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
        if self.env is not None and not ENV_NAME_RE.match(self.env):
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

    @field_validator("source", "path", "config")
    @classmethod
    def _paths(cls, value: Optional[str]) -> Optional[str]:
        return None if value is None else _safe_path(value)

    @field_validator("served_name")
    @classmethod
    def _served(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not re.match(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$", value):
            raise ValueError("use letters, digits and . _ : / -")
        return value

    @model_validator(mode="after")
    def _one_location(self) -> "ModelSpec":
        if (self.source is None) == (self.path is None):
            raise ValueError("give exactly one of `source` (pushed from the jump host) "
                             "or `path` (already on every node)")
        return self


class ProxySpec(Section):
    enabled: bool = False
    port: int = Field(default=8080, ge=1, le=65535)


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


class ServingSpec(Section):
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
    max_model_len: int = Field(default=32768, ge=16)
    max_num_seqs: int = Field(default=16, ge=1)
    max_num_batched_tokens: Optional[int] = Field(default=None, ge=16)
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
    hccl_connect_timeout: int = Field(default=600, ge=30)
    hccl_exec_timeout: int = Field(default=1836, ge=30)
    startup_timeout: int = Field(default=1800, ge=10)
    hbm_watchdog_threshold: float = Field(default=0.97, gt=0.5, le=1.0)
    proxy: ProxySpec = ProxySpec()
    health: HealthSpec = HealthSpec()

    @field_validator("extra_args")
    @classmethod
    def _args(cls, value: list[str]) -> list[str]:
        for arg in value:
            _safe_path(arg)
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_env(value)

    @field_validator("engine")
    @classmethod
    def _engine(cls, value: str) -> str:
        return _safe_path(value)

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

    @field_validator("*", mode="before")
    @classmethod
    def _as_text(cls, value: Any) -> Any:
        # YAML reads 3.11 as a float; versions are text.
        return str(value) if isinstance(value, (int, float)) else value


class DeploySpec(Section):
    root: str = "/var/lib/ascendctl"
    keep_releases: int = Field(default=5, ge=1, le=100)
    python: str = "/usr/bin/python3"   # the nodes' interpreter for the runtime (stdlib only)
    exporter_port: int = Field(default=9101, ge=1, le=65535)

    @field_validator("root", "python")
    @classmethod
    def _absolute(cls, value: str) -> str:
        _safe_path(value)
        if not value.startswith("/"):
            raise ValueError("must be an absolute path on the nodes")
        return value.rstrip("/") or "/"


class SloSpec(Section):
    min_output_tokens_per_s_per_npu: Optional[float] = Field(default=None, gt=0)
    max_p99_ttft_ms: Optional[float] = Field(default=None, gt=0)
    max_p99_tpot_ms: Optional[float] = Field(default=None, gt=0)


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
        if value is not None and not re.match(r"^\d+(-\d+)?(,\d+(-\d+)?)*$", value):
            raise ValueError("use a CPU list such as 0-23,48-71")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_env(value)

    @field_validator("ansible_host")
    @classmethod
    def _address(cls, value: str) -> str:
        if not re.match(r"^[A-Za-z0-9_.:-]+$", value):
            raise ValueError("not a host name or IP address")
        return value

    @field_validator("ip")
    @classmethod
    def _ip(cls, value: Optional[str]) -> Optional[str]:
        return None if value is None else _ipv4(value)

    @field_validator("nic")
    @classmethod
    def _nic(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not NIC_RE.match(value):
            raise ValueError("not a network interface name")
        return value
