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


def parse_env_file(text: str) -> dict[str, str]:
    """Read back what format_env_file writes (the launcher does the same outside systemd)."""
    result: dict[str, str] = {}
    for raw in text.split("\n"):   # not splitlines(): systemd splits on newlines only
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            out, i, body = [], 0, value[1:-1]
            while i < len(body):
                if body[i] == "\\" and i + 1 < len(body) and body[i + 1] in NEEDS_ESCAPE:
                    out.append(body[i + 1])
                    i += 2
                else:
                    out.append(body[i])
                    i += 1
            value = "".join(out)
        result[key.strip()] = value
    return result
