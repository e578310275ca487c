"""What a container engine's `options` and `mounts` may do to the node it runs on.

Two kinds of problem, both refused when the inventory is loaded:

- a mount (or `--tmpfs`) at, inside or above a destination the run gives the container
  itself (engine.container_run.reserved_targets): the runtime would refuse the duplicate
  destination when the engine starts, after the old engines were stopped;
- an option or mount that weakens the engine's isolation from its node, unless
  `engine.allow_unsafe` acknowledges it by name (preflight and status then warn):

  | name                 | what                                                        |
  |----------------------|-------------------------------------------------------------|
  | `privileged`         | `--privileged`                                              |
  | `cap-add:CAP`        | `--cap-add` of a capability outside SAFE_CAPABILITIES, `ALL` |
  | `security-opt:VALUE` | `--security-opt` other than the forms that only confine (`confining`) |
  | `mount:SOURCE`       | a mount of the node's /proc, /sys or /dev, of a top-level system directory, of /etc writable (its secrets even read-only), of a container runtime's socket or storage, of an .ssh directory, or of the deploy root writable |

The names are documented in docs/engine.md; the acknowledged ones a loaded inventory uses
are `Inventory.unsafe_engine_options`.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ascendctl.inventory.excerpt import excerpt
from ascendctl.inventory.validators import SYSTEM_DIRECTORIES, bad_character

# Linux capabilities (capabilities(7), up to CHECKPOINT_RESTORE in 5.9)
CAPABILITIES = frozenset({
    "AUDIT_CONTROL", "AUDIT_READ", "AUDIT_WRITE", "BLOCK_SUSPEND", "BPF",
    "CHECKPOINT_RESTORE", "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID",
    "IPC_LOCK", "IPC_OWNER", "KILL", "LEASE", "LINUX_IMMUTABLE", "MAC_ADMIN", "MAC_OVERRIDE",
    "MKNOD", "NET_ADMIN", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_RAW", "PERFMON",
    "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYSLOG", "SYS_ADMIN", "SYS_BOOT", "SYS_CHROOT",
    "SYS_MODULE", "SYS_NICE", "SYS_PACCT", "SYS_PTRACE", "SYS_RAWIO", "SYS_RESOURCE",
    "SYS_TIME", "SYS_TTY_CONFIG", "WAKE_ALARM",
})
# docker's default set (podman's is a subset) without NET_RAW (the engine shares the
# node's network: raw sockets on its NICs), plus what an engine legitimately asks for:
# IPC_LOCK (pinned memory for RDMA), SYS_NICE (CPU and NUMA binding), SYS_PTRACE (py-spy,
# gdb on the engine's own processes: the container has its own PID namespace)
SAFE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
    "IPC_LOCK", "SYS_NICE", "SYS_PTRACE",
})
# the node's kernel interfaces: any mount of them or inside them
KERNEL_DIRECTORIES = ("/proc", "/sys", "/dev")
# container runtimes' sockets and storage: whoever reaches them controls every container
RUNTIME_PATHS = (
    "/run/docker.sock", "/var/run/docker.sock", "/run/docker", "/var/run/docker",
    "/run/podman", "/var/run/podman", "/run/containerd", "/var/run/containerd",
    "/run/crio", "/var/run/crio", "/var/lib/docker", "/var/lib/containers",
    "/var/lib/containerd", "/run/dbus", "/var/run/dbus", "/run/systemd", "/var/run/systemd",
)
# secrets under /etc, refused even read-only
ETC_SECRETS = ("/etc/shadow", "/etc/gshadow", "/etc/ssh", "/etc/sudoers", "/etc/sudoers.d")
ACK_FORMS = "privileged, cap-add:CAP, security-opt:VALUE or mount:SOURCE"
_CAP_RE = re.compile(r"(?:CAP_)?([A-Z_]{2,32})")


@dataclass(frozen=True)
class UnsafeUse:
    name: str                  # as engine.allow_unsafe names it
    field: tuple[Any, ...]     # where in the engine section: ("options", 2)
    why: str


def capability(text: str) -> str | None:
    """`sys_admin`, `CAP_SYS_ADMIN` -> SYS_ADMIN; ALL; None when it is no capability."""
    match = _CAP_RE.fullmatch(text.strip().upper())
    if not match:
        return None
    name = match.group(1)
    return name if name in CAPABILITIES or name == "ALL" else None


def security_opt(text: str) -> tuple[str, str]:
    """`seccomp:unconfined` (docker's old spelling) and `seccomp=unconfined` -> the key in
    lower case and its value."""
    match = re.match(r"([^=:]*)[=:]?(.*)", text, re.DOTALL)
    assert match is not None
    return match.group(1).strip().lower(), match.group(2).strip()


def normalised(name: str) -> str:
    """An acknowledgement (or a use) in the one spelling they are compared in."""
    kind, _, arg = name.partition(":")
    if kind == "cap-add":
        return f"cap-add:{capability(arg) or arg}"
    if kind == "security-opt":
        key, value = security_opt(arg)
        return f"security-opt:{key}={value}" if value else f"security-opt:{key}"
    if kind == "mount":
        return f"mount:{posixpath.normpath(arg)}" if arg.startswith("/") else name
    return name


def acknowledgement_problem(name: Any) -> str | None:
    """Why `name` is not a well-formed engine.allow_unsafe item, or None."""
    if not isinstance(name, str):
        return f"{excerpt(name)}: each item is a name ({ACK_FORMS})"
    problem = bad_character(name)
    if problem:
        return problem
    kind, colon, arg = name.partition(":")
    if name == "privileged":
        return None
    if kind == "cap-add" and colon:
        if capability(arg) is None:
            return f"{excerpt(arg)} is not a Linux capability (e.g. cap-add:SYS_ADMIN)"
        return None
    if kind == "security-opt" and colon and arg.strip():
        return None
    if kind == "mount" and colon and arg.startswith("/"):
        return None
    return f"{excerpt(name)} is not an acknowledgement: use {ACK_FORMS}"


def _within(path: str, other: str) -> bool:
    """`path` is `other` or inside it."""
    return path == other or path.startswith(other.rstrip("/") + "/")


def relation(path: str, other: str) -> str | None:
    if path == other:
        return "is"
    if _within(path, other):
        return "is inside"
    if _within(other, path):
        return "contains"
    return None


def confining(key: str, value: str) -> bool:
    """A --security-opt that only adds or chooses confinement (every other form, e.g.
    seccomp=unconfined, apparmor=unconfined, label=disable, label=type:spc_t,
    no-new-privileges=false, systempaths=unconfined or unmask=ALL, removes some)."""
    if key == "no-new-privileges":
        return value.lower() in ("", "true")
    if key == "seccomp":
        return value.startswith("/")                   # a profile file on the node
    if key == "apparmor":
        return bool(value) and value != "unconfined"    # a profile by name
    if key == "label":
        return value.split(":", 1)[0] in ("user", "role", "level", "filetype")
    return key == "mask" and bool(value)


def _option_uses(options: list[str]) -> Iterator[UnsafeUse]:
    for index, item in enumerate(options):
        where = ("options", index)
        flag, _, arg = item.partition("=")
        if flag == "--privileged":
            yield UnsafeUse("privileged", where, "the container gets every device and "
                            "capability of the node and no confinement")
        elif flag == "--cap-add":
            for cap in filter(None, map(capability, arg.split(","))):
                if cap not in SAFE_CAPABILITIES:
                    yield UnsafeUse(f"cap-add:{cap}", where,
                                    "every capability of the node" if cap == "ALL" else
                                    f"the capability {cap} (outside the default set; the "
                                    "engine shares the node's network)")
        elif flag == "--security-opt" and not confining(*security_opt(arg)):
            yield UnsafeUse(normalised(f"security-opt:{arg}"), where,
                            "it removes a confinement the runtime applies by default")


def _unknown_capabilities(options: list[str]) -> Iterator[tuple[tuple[Any, ...], str]]:
    for index, item in enumerate(options):
        flag, _, arg = item.partition("=")
        if flag in ("--cap-add", "--cap-drop"):
            for part in arg.split(","):
                if capability(part) is None:
                    yield ("options", index), f"{excerpt(part)} is not a Linux capability"


def mount_risk(source: str, read_only: bool, deploy_root: str) -> str | None:
    """Why mounting the node's `source` into the engine is unsafe, or None."""
    for directory in KERNEL_DIRECTORIES:
        if _within(source, directory):
            return f"the node's {directory} (its kernel and devices)"
    for path in RUNTIME_PATHS:
        if relation(source, path):
            return f"a container runtime's socket or storage ({path}): control of every " \
                   "container, i.e. root on the node"
    if source.endswith((".sock", ".socket")):
        return "a socket: whatever answers on it acts for the container on the node"
    if ".ssh" in source.split("/"):
        return "an .ssh directory (SSH keys)"
    if not read_only and _within(source, "/etc"):
        return "the node's configuration (/etc), writable"
    for path in ETC_SECRETS:
        how = relation(source, path)
        if how:
            return f"{source} {how} {path}: password hashes, SSH host keys or sudo rules " \
                   "(refused even read-only)"
    if source in SYSTEM_DIRECTORIES:
        return f"the system directory {source}"
    if not read_only and relation(source, deploy_root):
        return f"the deploy root {deploy_root} (releases, weights and every release's " \
               "secrets file), writable"
    return None


def unsafe_uses(engine: Any, deploy_root: str) -> list[UnsafeUse]:
    """The unsafe options and mounts of a container engine, in field order (none for
    the other kinds: they have neither)."""
    uses = list(_option_uses(engine.options))
    for index, mount in enumerate(engine.mounts):
        why = mount_risk(mount.source, mount.read_only, deploy_root)
        if why:
            uses.append(UnsafeUse(f"mount:{mount.source}", ("mounts", index, "source"), why))
    return uses


def _tmpfs_targets(options: list[str]) -> Iterator[tuple[tuple[Any, ...], str]]:
    for index, item in enumerate(options):
        flag, _, arg = item.partition("=")
        if flag == "--tmpfs":
            yield ("options", index), posixpath.normpath(arg.split(":", 1)[0])


def engine_problems(engine: Any, *, deploy_root: str,
                    reserved: Sequence[tuple[str, str]]) -> list[tuple[tuple[Any, ...], str]]:
    """(field within the engine section, message) for each problem of a container
    engine, in this order: a destination ascendctl's own run uses (`reserved`: (path,
    what is there)), an option that is no capability, an unsafe use not acknowledged, an
    acknowledgement nothing uses."""
    problems: list[tuple[tuple[Any, ...], str]] = []
    targets = [(("mounts", i, "target"), m.target) for i, m in enumerate(engine.mounts)]
    for where, target in targets + list(_tmpfs_targets(engine.options)):
        for own, what in reserved:
            how = relation(target, own)
            if how:
                problems.append((where, f"{excerpt(target)} {how} {own}, where ascendctl "
                                        f"mounts {what}: podman and docker refuse a second "
                                        "mount there when the engine starts (after the old "
                                        "engines were stopped); mount it elsewhere"))
                break
    problems += list(_unknown_capabilities(engine.options))
    acknowledged = {normalised(name): index for index, name in enumerate(engine.allow_unsafe)}
    used = set()
    for use in unsafe_uses(engine, deploy_root):
        used.add(use.name)
        if use.name not in acknowledged:
            problems.append((use.field, f"{use.name} is unsafe: {use.why}; if the engine "
                                        "really needs it, acknowledge it with "
                                        f"engine.allow_unsafe: [{use.name}] (preflight and "
                                        "status then warn about it)"))
    for name, index in acknowledged.items():
        if name not in used:
            problems.append((("allow_unsafe", index),
                             f"{excerpt(name)} acknowledges nothing the engine's options or "
                             "mounts use: remove it"))
    return problems
