"""The one set of validators for inventory values that reach an argv, a unit file, an
environment file or nginx.

Every pattern is applied with `re.fullmatch`: `re.match(r"^…$")` accepts "value\\n"
(`$` matches before a final newline), and a trailing newline splits a systemd directive.
Every validator raises ValueError with a message that never echoes the value (a pasted
secret must not reach the terminal).
"""

from __future__ import annotations

import ipaddress
import math
import re
import unicodedata

from ascendctl.facts.versions import try_parse_version
from ascendctl.inventory.excerpt import excerpt

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
NIC_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,14}")
ENV_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
USER_PATTERN = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")
HOSTNAME_PATTERN = re.compile(r"(?=.{1,253}\Z)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
                              r"(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?")
SERVED_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}")
CPU_LIST_PATTERN = re.compile(r"\d{1,4}(-\d{1,4})?(,\d{1,4}(-\d{1,4})?)*")
TOKEN_PATTERN = re.compile(r"[^\s-][^\s]*")
# Top-level directories a deploy root must never be (prune deletes under the root).
SYSTEM_DIRECTORIES = frozenset({"/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64",
                                "/proc", "/root", "/run", "/sbin", "/sys", "/tmp", "/usr",
                                "/var", "/opt", "/srv", "/mnt", "/media"})


def bad_character(value: str) -> str | None:
    """Why `value` holds a character no file or argv may carry, or None."""
    for ch in value:
        category = unicodedata.category(ch)
        if category == "Cs":
            return "must not contain lone surrogates (not valid UTF-8)"
        if category == "Cc" or ch in "\u2028\u2029\ufeff":
            return "must not contain newlines or control characters"
    return None


def text(value: str) -> str:
    """Printable text: no control characters, no lone surrogates, not empty."""
    if not isinstance(value, str):
        raise ValueError("must be a string")
    problem = bad_character(value)
    if problem:
        raise ValueError(problem)
    if not value:
        raise ValueError("must not be empty")
    return value


def no_leading_dash(value: str) -> str:
    if value.startswith("-"):
        raise ValueError("must not begin with '-' (it would be read as an option)")
    return value


VERSION_MAX_CHARS = 64


def version(value: str) -> str:
    """A version as the Ascend and Python stacks write them (24.1.rc2.2, 7.0.T10, 8.0.RC3,
    2.9.0.post1+git4c901a4, v0.17.0rc1): one word that parses as a version."""
    safe_token(value)
    if len(value) > VERSION_MAX_CHARS or try_parse_version(value) is None:
        raise ValueError("not a version (versions look like 24.1.rc2, 8.5.1, 2.9.0.post1 "
                         "or 0.17.0rc1)")
    return value


def safe_token(value: str) -> str:
    """One argv word: printable, no whitespace, not an option."""
    text(value)
    no_leading_dash(value)
    if not TOKEN_PATTERN.fullmatch(value):
        raise ValueError("must be one word without spaces")
    return value


def path(value: str) -> str:
    """A file path on the controller (may start with ~): printable, not an option."""
    text(value)
    no_leading_dash(value)
    return value


def absolute_path(value: str, *, allow_root: bool = False) -> str:
    """An absolute, normalised path on the nodes: no `..`, `.` or empty components
    (trailing slashes are dropped), not `/` unless allowed."""
    text(value)
    if not value.startswith("/"):
        raise ValueError("must be an absolute path (start with /)")
    parts = value.rstrip("/").split("/")[1:]
    if any(part == ".." for part in parts):
        raise ValueError("must not contain '..'")
    if any(part in ("", ".") for part in parts):
        raise ValueError("must be normalised (no '//' or '/./')")
    normalised = "/" + "/".join(parts)
    if normalised == "/" and not allow_root:
        raise ValueError("must not be / itself")
    return normalised


def deploy_root(value: str) -> str:
    normalised = absolute_path(value)
    if normalised in SYSTEM_DIRECTORIES:
        raise ValueError(f"must not be the system directory {normalised} (releases are "
                         "pruned under it): use a directory of its own")
    return normalised


def fullmatch(pattern: re.Pattern[str], value: str, message: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise ValueError(message)
    return value


def name(value: str) -> str:
    return fullmatch(NAME_PATTERN, value, "use letters, digits, '.', '_' or '-' (at most 63, "
                                          "starting with a letter or digit)")


def nic(value: str) -> str:
    return fullmatch(NIC_PATTERN, value, "not a network interface name")


def env_value(key: str, value: object) -> str:
    if isinstance(value, bool):
        raise ValueError(f"{key}: YAML read this as a boolean; quote it (e.g. \"1\" or "
                         "\"true\")")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{key}: not a finite number")
    if not isinstance(value, (str, int, float)):
        raise ValueError(f"{key}: must be a string or a number")
    as_text = str(value)
    problem = bad_character(as_text)
    if problem:
        raise ValueError(f"{key}: values {problem}")
    return as_text


def environment(value: dict) -> dict[str, str]:
    result: dict[str, str] = {}
    for key, val in value.items():
        if not isinstance(key, str) or not ENV_NAME_PATTERN.fullmatch(key):
            raise ValueError(f"{excerpt(key)} is not an environment variable name")
        result[key] = env_value(key, val)
    return result


def user(value: str) -> str:
    return fullmatch(USER_PATTERN, value, "not a valid user name")


def host(value: str) -> str:
    """An SSH address: a host name, an IPv4 or IPv6 address. Never an option.

    IPv6 is written bare (ascendctl adds the brackets where a port follows), and only in
    the forms nginx, Prometheus and sshd's `from=` all read the same way."""
    if not isinstance(value, str):
        raise ValueError("must be a string")
    if HOSTNAME_PATTERN.fullmatch(value) and not value.startswith("-"):
        if re.fullmatch(r"[\d.]+", value):
            return unicast_ipv4(value)
        return value
    if value.startswith("[") and ":" in value:
        raise ValueError("write the IPv6 address without brackets (they are added where a "
                         "port follows; the SSH port goes in ansible_port)")
    if ":" in value and "%" in value:
        raise ValueError("a scoped IPv6 address (with a %zone) cannot be used: nginx refuses "
                         "it; use a global or unique-local address")
    if ":" in value and re.fullmatch(r"[0-9A-Fa-f:.]+", value):
        try:
            address = ipaddress.IPv6Address(value)
        except ValueError:
            pass
        else:
            unicast_ipv6(address)
            return value
    raise ValueError("not a host name or IP address")


def unicast_ipv6(address: ipaddress.IPv6Address) -> None:
    if address.is_unspecified:
        raise ValueError("the unspecified address ::, not a host's address")
    if address.is_multicast:
        raise ValueError("a multicast IPv6 address (ff00::/8), not a host's address")
    if address.is_link_local:
        raise ValueError("a link-local IPv6 address (fe80::/10) is reachable only with a "
                         "%zone, which nginx refuses: use a global or unique-local address")
    if address.ipv4_mapped is not None:
        raise ValueError("an IPv4-mapped IPv6 address (::ffff:a.b.c.d): write the IPv4 "
                         "address itself")


def unicast_ipv4(value: str) -> str:
    if not isinstance(value, str):
        raise ValueError("must be an IPv4 address as a string")
    try:
        address = ipaddress.IPv4Address(value)
    except ValueError:
        raise ValueError(f"{excerpt(value)} is not an IPv4 address") from None
    if address.is_unspecified:
        raise ValueError(f"{value} is the unspecified address, not a host's address")
    if address == ipaddress.IPv4Address("255.255.255.255"):
        raise ValueError(f"{value} is the broadcast address, not a host's address")
    if address.is_multicast:
        raise ValueError(f"{value} is a multicast address, not a host's address")
    if address.is_reserved:
        raise ValueError(f"{value} is in the reserved range 240.0.0.0/4")
    return str(address)


def netmask(value: str) -> str:
    """A dotted netmask (contiguous ones, /8 to /30). A hostmask (0.0.0.255) is refused,
    though Python's ipaddress accepts it as a prefix."""
    if not isinstance(value, str):
        raise ValueError("must be a dotted netmask such as 255.255.255.0")
    try:
        mask = int(ipaddress.IPv4Address(value))
    except ValueError:
        raise ValueError(f"{excerpt(value)} is not a netmask") from None
    inverted = ~mask & 0xFFFFFFFF
    if inverted & (inverted + 1):
        raise ValueError(f"{value} is not a netmask (a hostmask or non-contiguous mask?)")
    prefix = 32 - inverted.bit_length()
    if not 8 <= prefix <= 30:
        raise ValueError(f"{value} (/{prefix}) leaves no room for hosts: use /8 to /30")
    return value


def jump_host(value: str) -> str:
    """OpenSSH ProxyJump: [user@]host[:port], never an option."""
    if not isinstance(value, str):
        raise ValueError("must be a string")
    match = re.fullmatch(r"(?:([^@\s]+)@)?(\[[0-9A-Fa-f:.]+\]|[^:@\s\[\]]+)(?::(\d{1,5}))?",
                         value)
    if not match:
        raise ValueError("use [user@]host[:port]")
    login, address, port = match.groups()
    if login is not None:
        user(login)
    host(address.strip("[]"))
    if port is not None and not 1 <= int(port) <= 65535:
        raise ValueError("port must be 1..65535")
    return value


def served_name(value: str) -> str:
    return fullmatch(SERVED_NAME_PATTERN, value, "use letters, digits and . _ : / - (at most "
                                                 "128, starting with a letter or digit)")


def cpu_list(value: str) -> str:
    return fullmatch(CPU_LIST_PATTERN, value, "use a CPU list such as 0-23,48-71")


def executable(value: str) -> str:
    """A program: an absolute normalised path, or a bare name looked up on PATH."""
    if isinstance(value, str) and "/" in value:
        return absolute_path(value)
    safe_token(value)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]*", value):
        raise ValueError("use an absolute path or a program name")
    return value
