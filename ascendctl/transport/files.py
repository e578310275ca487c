"""Files over the command channel: compare and write in ONE remote execution, no SFTP.

The content travels on stdin into a temp file next to the target, which is renamed over
it only when the sha256 differs (rename is atomic on one filesystem). Mode, owner and
group are applied to the temp file before the rename, so the target never exists with
the wrong permissions. In check mode the content is hashed from stdin and nothing is
written. Paths, modes and owners are positional parameters of a constant script.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from ascendctl.errors import AscendctlError
from ascendctl.transport.errors import RemoteCommandError

if TYPE_CHECKING:
    from ascendctl.transport.remote import Remote

MAX_BEFORE_BYTES = 256 * 1024
OWNER_RE = re.compile(r"^([a-z_][a-z0-9_.-]{0,31}\$?|[0-9]{1,10})$")

PUT_FILE_SCRIPT = r"""
set -eu
p=$1 mode=$2 owner=$3 group=$4 check=$5 want_before=$6 max_before=$7
case $p in /*) ;; *) echo "error=path must be absolute: $p"; exit 2;; esac
if [ -d "$p" ]; then echo "error=$p is a directory"; exit 2; fi
dir=$(dirname -- "$p")
tmp=
if [ "$check" = 1 ]; then
  new_sha=$(sha256sum | cut -c1-64)
else
  if [ ! -d "$dir" ]; then echo "error=parent directory $dir does not exist"; exit 2; fi
  umask 077
  tmp=$(mktemp "$dir/.ascendctl.XXXXXX")
  trap 'if [ -n "$tmp" ]; then rm -f -- "$tmp"; fi' EXIT
  cat > "$tmp"
  new_sha=$(sha256sum < "$tmp" | cut -c1-64)
fi
exists=0 old_sha= cur_mode= cur_owner= cur_group= cur_uid= cur_gid= size=0
if [ -e "$p" ]; then
  exists=1
  old_sha=$(sha256sum < "$p" | cut -c1-64)
  set -- $(stat -L -c '%a %U %G %u %g %s' -- "$p")
  cur_mode=$1 cur_owner=$2 cur_group=$3 cur_uid=$4 cur_gid=$5 size=$6
fi
content=1
if [ "$exists" = 1 ] && [ "$old_sha" = "$new_sha" ]; then content=0; fi
attrs=0
if [ "$exists" = 1 ]; then
  if [ -n "$mode" ] && [ "$mode" != "$cur_mode" ]; then attrs=1; fi
  if [ -n "$owner" ] && [ "$owner" != "$cur_owner" ] && [ "$owner" != "$cur_uid" ]; then attrs=1; fi
  if [ -n "$group" ] && [ "$group" != "$cur_group" ] && [ "$group" != "$cur_gid" ]; then attrs=1; fi
fi
echo "exists=$exists"
echo "content_changed=$content"
echo "attrs_changed=$attrs"
echo "before_mode=$cur_mode"
echo "before_owner=$cur_owner"
echo "before_group=$cur_group"
echo "sha256=$new_sha"
if [ "$content" = 1 ] && [ "$exists" = 1 ] && [ "$want_before" = 1 ]; then
  if [ "$size" -le "$max_before" ]; then
    printf 'before_b64='; base64 -w0 < "$p"; echo
  else
    echo "before_skipped=$size bytes"
  fi
fi
if [ "$check" = 0 ]; then
  if [ "$content" = 1 ]; then
    if [ -n "$mode" ]; then chmod -- "$mode" "$tmp"
    elif [ "$exists" = 1 ]; then chmod -- "$cur_mode" "$tmp"
    else chmod 644 "$tmp"; fi
    if [ "$exists" = 1 ]; then chown -- "$cur_uid:$cur_gid" "$tmp" 2>/dev/null || true; fi
    if [ -n "$owner" ]; then chown -- "$owner" "$tmp"; fi
    if [ -n "$group" ]; then chgrp -- "$group" "$tmp"; fi
    mv -f -- "$tmp" "$p"
    tmp=
  elif [ "$attrs" = 1 ]; then
    if [ -n "$mode" ]; then chmod -- "$mode" "$p"; fi
    if [ -n "$owner" ]; then chown -- "$owner" "$p"; fi
    if [ -n "$group" ]; then chgrp -- "$group" "$p"; fi
  fi
fi
echo "done=1"
"""

READ_FILE_SCRIPT = r"""
if [ -f "$1" ]; then echo found; exec base64 -w0 < "$1"; else echo missing; fi
"""


@dataclass(frozen=True)
class FileChange:
    path: str
    existed: bool
    content_changed: bool
    attrs_changed: bool
    sha256: str
    before_mode: Optional[str] = None
    before_owner: Optional[str] = None
    before_group: Optional[str] = None
    before: Optional[bytes] = None       # previous content, when asked and small enough
    before_note: Optional[str] = None    # why `before` is missing (e.g. too large)

    @property
    def changed(self) -> bool:
        return self.content_changed or self.attrs_changed

    def before_text(self) -> Optional[str]:
        if self.before is None:
            return None
        try:
            return self.before.decode("utf-8")
        except UnicodeDecodeError:
            return None


class FileError(AscendctlError):
    pass


def normalize_mode(mode: int | str | None) -> str:
    """Octal text as `stat -c %a` prints it ('644', '4755'), or '' for no change."""
    if mode is None or mode == "":
        return ""
    if isinstance(mode, bool):
        raise FileError(f"invalid mode {mode!r}")
    if isinstance(mode, int):
        value = mode
    else:
        text = str(mode).strip()
        if not re.fullmatch(r"0?[0-7]{3,4}", text):
            raise FileError(f"invalid mode {mode!r}: use octal text such as '0644'")
        value = int(text, 8)
    if not 0 <= value <= 0o7777:
        raise FileError(f"invalid mode {mode!r}")
    return format(value, "o")


def check_owner(value: str | None, what: str = "owner") -> str:
    if value is None or value == "":
        return ""
    if not OWNER_RE.fullmatch(str(value)):
        raise FileError(f"invalid {what} {value!r}")
    return str(value)


def put_file(conn: "Remote", path: str, data: bytes | str, *,
             mode: int | str | None = None, owner: str | None = None,
             group: str | None = None, check: bool = False, want_before: bool = False,
             become: bool | None = None) -> FileChange:
    """Make `path` hold `data` (and mode/owner/group) in one execution; report the change."""
    payload = data.encode() if isinstance(data, str) else data
    args = [path, normalize_mode(mode), check_owner(owner), check_owner(group, "group"),
            "1" if check else "0", "1" if want_before else "0", str(MAX_BEFORE_BYTES)]
    result = conn.run_shell(PUT_FILE_SCRIPT, args, stdin=payload, become=become)
    fields = parse_fields(result.stdout)
    if "error" in fields:
        raise FileError(f"{conn.name}: {path}: {fields['error']}")
    if not result.ok or fields.get("done") != "1":
        raise RemoteCommandError(result)
    before = None
    if "before_b64" in fields:
        before = base64.b64decode(fields["before_b64"])
    return FileChange(
        path=path, existed=fields.get("exists") == "1",
        content_changed=fields.get("content_changed") == "1",
        attrs_changed=fields.get("attrs_changed") == "1", sha256=fields.get("sha256", ""),
        before_mode=fields.get("before_mode") or None,
        before_owner=fields.get("before_owner") or None,
        before_group=fields.get("before_group") or None, before=before,
        before_note=(f"previous content not shown ({fields['before_skipped']})"
                     if "before_skipped" in fields else None))


def read_file(conn: "Remote", path: str, *, become: bool | None = None) -> bytes | None:
    """The content of a remote regular file, or None when it does not exist."""
    result = conn.run_shell(READ_FILE_SCRIPT, [path], become=become)
    head, _, body = result.stdout.partition("\n")
    if not result.ok:
        raise RemoteCommandError(result)
    if head == "missing":
        return None
    return base64.b64decode(body.strip())


def parse_fields(text: str) -> dict[str, str]:
    """`key=value` lines (the first `=` splits; later lines win)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            fields[key] = value
    return fields
