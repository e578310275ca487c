"""Driver, firmware and CANN toolkit version files.

- `/usr/local/Ascend/driver/version.info`: `Key=Value` with `Version`, `Innerversion`
  (`V100R001C19SPC001B124`), `compatible_version` (inner codes the toolkit may name) and
  `compatible_version_fw` (`[7.0.0,7.5.99]`, or several ranges).
- `/usr/local/Ascend/firmware/version.info`: `Version=7.5.0.1.129`,
  `compatible_version_drv=[23.0.0,23.0.0.],[24.0,24.0.]` (prefix ranges, trailing dot).
- `.../ascend-toolkit/latest/<arch>-linux/ascend_toolkit_install.info`: `version=8.2.RC1`,
  `innerversion=...`, `compatible_version=[V100R001C15],...`.
- `.../ascend-toolkit/latest/version.cfg`: `runtime_running_version=[7.6.0.1.220:8.0.0]`;
  the part after the colon is the CANN version.
Captures may carry `cat -n` numbers or indentation; both are tolerated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from shlex import quote
from typing import Callable, TypeVar

from ascendctl.facts.fact import Fact
from ascendctl.facts.params import GatherParams
from ascendctl.facts.versions import (
    InnerCode,
    InnerCodeRange,
    Version,
    VersionError,
    VersionRange,
    parse_inner_code,
    parse_inner_code_list,
    parse_version_ranges,
    try_parse_version,
)

_Range = TypeVar("_Range", VersionRange, InnerCodeRange)


def parse_key_values(text: str, separator: str = "=") -> dict[str, str]:
    """`Key=Value` lines (first occurrence wins); leading `cat -n` numbers are ignored."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = re.sub(r"^\s*\d+\s+(?=\S)", "", raw).strip()
        if not line or line.startswith("#") or separator not in line:
            continue
        key, _, value = line.partition(separator)
        key = key.strip()
        if not key or " " in key and separator == "=":
            continue
        out.setdefault(key, value.strip().strip('"'))
    return out


@dataclass(frozen=True)
class DriverVersionInfo:
    version: str | None
    inner_version: str | None
    compatible_inner: tuple[InnerCodeRange, ...]
    compatible_fw: tuple[VersionRange, ...]
    package_version: str | None
    problems: tuple[str, ...] = ()

    @property
    def inner_code(self) -> InnerCode | None:
        try:
            return parse_inner_code(self.inner_version) if self.inner_version else None
        except VersionError:
            return None

    @property
    def parsed(self) -> Version | None:
        return try_parse_version(self.version)


def _compatible(kv: dict[str, str], key: str, parse: Callable[[str], tuple[_Range, ...]],
                problems: list[str]) -> tuple[_Range, ...]:
    """The ranges under KEY parsed with PARSE; () when there are none, or when they do not
    parse (noted in PROBLEMS)."""
    value = kv.get(key)
    if not value:
        return ()
    try:
        return parse(value)
    except VersionError as err:
        problems.append(f"{key}: {err}")
        return ()


def parse_driver_version_info(text: str) -> DriverVersionInfo | None:
    kv = parse_key_values(text)
    if "Version" not in kv and "Innerversion" not in kv:
        return None
    problems: list[str] = []
    return DriverVersionInfo(
        version=kv.get("Version"),
        inner_version=kv.get("Innerversion"),
        compatible_inner=_compatible(kv, "compatible_version", parse_inner_code_list, problems),
        compatible_fw=_compatible(kv, "compatible_version_fw", parse_version_ranges, problems),
        package_version=kv.get("package_version"),
        problems=tuple(problems),
    )


@dataclass(frozen=True)
class FirmwareVersionInfo:
    version: str | None
    package_version: str | None
    compatible_drv: tuple[VersionRange, ...]
    problems: tuple[str, ...] = ()

    @property
    def parsed(self) -> Version | None:
        return try_parse_version(self.version)


def parse_firmware_version_info(text: str) -> FirmwareVersionInfo | None:
    kv = parse_key_values(text)
    if "Version" not in kv:
        return None
    problems: list[str] = []
    return FirmwareVersionInfo(
        version=kv.get("Version"),
        package_version=kv.get("package_version"),
        compatible_drv=_compatible(kv, "compatible_version_drv", parse_version_ranges, problems),
        problems=tuple(problems),
    )


@dataclass(frozen=True)
class ToolkitInfo:
    package_name: str | None
    version: str | None
    inner_version: str | None
    compatible_inner: tuple[InnerCodeRange, ...]
    arch: str | None
    path: str | None
    problems: tuple[str, ...] = ()

    @property
    def parsed(self) -> Version | None:
        return try_parse_version(self.version)

    def accepts_driver(self, code: InnerCode) -> bool:
        return any(r.contains(code) for r in self.compatible_inner)


def parse_toolkit_install_info(text: str) -> ToolkitInfo | None:
    kv = parse_key_values(text)
    if "version" not in kv:
        return None
    problems: list[str] = []
    return ToolkitInfo(
        package_name=kv.get("package_name"),
        version=kv.get("version"),
        inner_version=kv.get("innerversion"),
        compatible_inner=_compatible(kv, "compatible_version", parse_inner_code_list, problems),
        arch=kv.get("arch"),
        path=kv.get("path"),
        problems=tuple(problems),
    )


@dataclass(frozen=True)
class VersionCfg:
    """`latest/version.cfg`: component -> (inner build, CANN version)."""

    entries: tuple[tuple[str, str, str], ...]   # (key, build, cann)

    @property
    def cann_version(self) -> str | None:
        for key, _, cann in self.entries:
            if key in ("runtime_running_version", "toolkit_running_version"):
                return cann
        return self.entries[0][2] if self.entries else None


def parse_version_cfg(text: str) -> VersionCfg | None:
    entries: list[tuple[str, str, str]] = []
    for key, value in parse_key_values(text).items():
        m = re.match(r"^\[([^:\]]+):([^\]]+)\]$", value)
        if m:
            entries.append((key, m.group(1), m.group(2)))
    return VersionCfg(tuple(entries)) if entries else None


def parse_install_status(text: str) -> str | None:
    """`/etc/ascend_install.info`: `Driver_Install_Status=complete` when installed fully."""
    return parse_key_values(text).get("Driver_Install_Status")


def _toolkit_command(p: GatherParams) -> str:
    """The first install.info of the toolkit (or the CANN package that replaces it)."""
    root = quote(p.root)
    return (f"for f in {root}/ascend-toolkit/latest/*-linux/ascend_toolkit_install.info "
            f"{root}/ascend-toolkit/latest/ascend_toolkit_install.info "
            f"{root}/cann/latest/*-linux/ascend_toolkit_install.info; do "
            f"if [ -f \"$f\" ]; then echo \"# path: $f\"; cat \"$f\"; exit 0; fi; done; "
            f"echo 'no ascend_toolkit_install.info' >&2; exit 2")


DRIVER = Fact("driver", section="version:driver", command=lambda p: f"cat {quote(p.root + '/driver/version.info')}",
              parse=parse_driver_version_info)
FIRMWARE = Fact("firmware", section="version:firmware",
                command=lambda p: f"cat {quote(p.root + '/firmware/version.info')}",
                parse=parse_firmware_version_info)
TOOLKIT = Fact("toolkit", section="version:toolkit", command=_toolkit_command, parse=parse_toolkit_install_info)
TOOLKIT_CFG = Fact("toolkit_cfg", section="version:cfg",
                   command=lambda p: f"cat {quote(p.root + '/ascend-toolkit/latest/version.cfg')}",
                   parse=parse_version_cfg)
DRIVER_INSTALL_STATUS = Fact("driver_install_status", section="install_info",
                             command="cat /etc/ascend_install.info", parse=parse_install_status)
