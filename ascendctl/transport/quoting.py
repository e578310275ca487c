"""Building remote command lines: every value is quoted, nothing is interpolated raw.

The only way a command reaches a remote shell is as a string; these helpers are how
that string is built from argument lists, so an inventory value such as
`/srv/x$(touch /tmp/p)` arrives as one literal argument.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Union

Arg = Union[str, int, float, "os.PathLike[str]"]

ENV_NAME_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")  # \Z: no trailing newline
SCRIPT_NAME = "ascendctl"  # $0 of `sh -c SCRIPT $0 ARGS...`


def _as_text(arg: Arg) -> str:
    if isinstance(arg, bool):
        raise TypeError(f"refusing to quote a bool ({arg!r}); convert it explicitly")
    if isinstance(arg, (int, float)):
        return str(arg)
    if isinstance(arg, os.PathLike):
        arg = os.fspath(arg)
    if not isinstance(arg, str):
        raise TypeError(f"command arguments must be text, not {type(arg).__name__}")
    if "\x00" in arg:
        raise ValueError("command arguments must not contain NUL bytes")
    return arg


def quote(arg: Arg) -> str:
    """One argument, quoted for a POSIX shell."""
    return shlex.quote(_as_text(arg))


def join_argv(argv: Sequence[Arg]) -> str:
    """An argv list as one shell command line (each element a single literal word)."""
    if isinstance(argv, (str, bytes)):
        raise TypeError("join_argv takes a list of arguments, not a string")
    if not argv:
        raise ValueError("empty command")
    return " ".join(quote(arg) for arg in argv)


def sh_c(script: str, args: Sequence[Arg] = (), *, shell: str = "sh") -> str:
    """`sh -c SCRIPT ascendctl ARG...`: a constant script that reads its values from "$1"...

    The script text is quoted as one word; values travel as positional parameters and
    are never part of the script's source.
    """
    return join_argv([shell, "-c", script, SCRIPT_NAME, *args])


def sh_s(args: Sequence[Arg] = (), *, shell: str = "sh") -> str:
    """`sh -s -- ARG...`: the script comes on stdin, values as positional parameters."""
    return join_argv([shell, "-s", "--", *args])


def with_env(env: Mapping[str, Arg] | None, argv: Sequence[Arg]) -> list[Arg]:
    """Prefix argv with `env NAME=VALUE ...` (works without sshd's AcceptEnv)."""
    if not env:
        return list(argv)
    prefix: list[Arg] = ["env"]
    for name, value in env.items():
        if not ENV_NAME_RE.fullmatch(name):
            raise ValueError(f"{name!r} is not an environment variable name")
        prefix.append(f"{name}={_as_text(value)}")
    return prefix + list(argv)


def become(command: str, *, sudo: bool, user: str | None = None) -> str:
    """Wrap a command line so it runs as root (or `user`) through non-interactive sudo.

    `sudo -n` fails at once instead of waiting for a password nobody will type.
    """
    if not sudo:
        return command
    argv: list[Arg] = ["sudo", "-n", "-H"]
    if user:
        argv += ["-u", user]
    return join_argv([*argv, "--", "sh", "-c", command])
