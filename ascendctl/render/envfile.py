"""systemd EnvironmentFile syntax: every value double-quoted, with exactly the escapes
systemd's parser understands inside double quotes (backslash before `"`, `\\`, `` ` `` and
`$`). Values never hold control characters (the inventory rejects them)."""

from __future__ import annotations

NEEDS_ESCAPE = '"\\`$'


def quote_env_value(value: str) -> str:
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ValueError("environment values must not contain control characters")
    return '"' + "".join("\\" + ch if ch in NEEDS_ESCAPE else ch for ch in value) + '"'


def format_env_file(pairs: list[tuple[str, str]], header: str = "") -> str:
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    lines += [f"{key}={quote_env_value(value)}" for key, value in pairs]
    return "\n".join(lines) + "\n"
