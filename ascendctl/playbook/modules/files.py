"""template, copy, file, directory, symlink: each a single remote execution.

template and copy send the content on stdin; the node compares sha256 and replaces the
file atomically only when it differs (ascendctl.transport.files.put_file). file,
directory and symlink run one constant script whose values are positional parameters.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from ascendctl.errors import InputError
from ascendctl.inventory.inputfile import open_input_file, read_input_bytes
from ascendctl.playbook.modules.base import (
    FileDiff, Module, ModuleContext, ModuleError, ModuleResult, register_module,
)
from ascendctl.playbook.templating import Templar, is_template
from ascendctl.transport.files import (
    FileChange, FileError, check_owner, normalize_mode, parse_fields, put_file,
)

if TYPE_CHECKING:
    from ascendctl.transport import CommandResult

# A copy source is sent whole on stdin and kept for the diff: configuration, scripts, small
# assets. Larger files belong in the engine archive, the wheelhouse or the weights.
MAX_COPY_SOURCE_BYTES = 4 << 20


def remote_path(value: str) -> str:
    if not isinstance(value, str) or not value.startswith("/"):
        raise ValueError(f"must be an absolute path on the node (got {value!r})")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ValueError("must not contain newlines or control characters")
    if value.rstrip("/") == "":
        raise ValueError("refusing to operate on /")
    return value


def mode_text(value: Any) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        raise ValueError("write the mode as a quoted octal string such as '0644' (YAML reads "
                         "an unquoted 0644 as the number 420)")
    try:
        return normalize_mode(value) or None
    except FileError as err:
        raise ValueError(str(err)) from None


class _FileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Optional[str] = None
    owner: Optional[str] = None
    group: Optional[str] = None

    @field_validator("mode", mode="before")
    @classmethod
    def _mode(cls, value: Any) -> Optional[str]:
        return mode_text(value)

    @field_validator("owner", "group")
    @classmethod
    def _owner(cls, value: Optional[str]) -> Optional[str]:
        try:
            return check_owner(value) or None
        except FileError as err:
            raise ValueError(str(err)) from None


def _file_result(ctx: ModuleContext, change: FileChange, after: str | None,
                 dest: str) -> ModuleResult:
    diffs: list[FileDiff] = []
    if ctx.diff and change.content_changed:
        before = change.before_text() if change.existed else None
        note = change.before_note
        if change.existed and change.before is not None and before is None:
            note = "binary content differs"
        diffs.append(FileDiff(path=dest, before=before, after=after, note=note))
    if ctx.diff and change.attrs_changed and not change.content_changed:
        diffs.append(FileDiff(path=dest, before=None, after=None,
                              note=f"mode/owner change (was {change.before_mode} "
                              f"{change.before_owner}:{change.before_group})"))
    what = []
    if change.content_changed:
        what.append("content" if change.existed else "created")
    if change.attrs_changed:
        what.append("mode/owner")
    if not what:
        msg = ""
    elif not change.existed:
        msg = "would create" if ctx.check else "created"
    else:
        msg = ("would change " if ctx.check else "changed ") + " and ".join(what)
    return ModuleResult(changed=change.changed, msg=msg,
                        data={"dest": dest, "sha256": change.sha256, "changed_parts": what},
                        diffs=diffs)


@register_module("template")
class TemplateModule(Module):
    """Render a Jinja2 template from templates/ and write it atomically (one execution)."""

    class Args(_FileArgs):
        src: str
        dest: str

        _dest = field_validator("dest")(lambda v: remote_path(v))

    @staticmethod
    def check_at_load(args: dict[str, Any], templar: Templar) -> None:
        src = args.get("src")
        if isinstance(src, str) and not is_template(src) and templar.find_template(src) is None:
            where = ", ".join(str(p) for p in templar.search_path)
            raise ModuleError(f"template {src!r} not found (searched {where})", field="src")

    def run(self, ctx: ModuleContext, args: Any) -> ModuleResult:
        text = ctx.templar.render_file(args.src, ctx.vars)
        change = put_file(ctx.conn, args.dest, text, mode=args.mode, owner=args.owner,
                          group=args.group, check=ctx.check, want_before=ctx.diff,
                          become=ctx.become)
        return _file_result(ctx, change, text, args.dest)


@register_module("copy")
class CopyModule(Module):
    """Write `content` (or a controller file `src`, looked up in files/) atomically."""

    class Args(_FileArgs):
        dest: str
        content: Optional[str] = None
        src: Optional[str] = None

        _dest = field_validator("dest")(lambda v: remote_path(v))

        @model_validator(mode="after")
        def _one(self) -> "CopyModule.Args":
            if (self.content is None) == (self.src is None):
                raise ValueError("give exactly one of `content` or `src`")
            return self

    @staticmethod
    def local_source(src: str, playbook_dir: Path) -> Path:
        path = Path(os.path.expanduser(src))
        if path.is_absolute():
            return path
        for root in (playbook_dir / "files", playbook_dir):
            if os.path.lexists(root / path):
                return root / path
        return playbook_dir / "files" / path

    @classmethod
    def check_local_files(cls, args: dict[str, Any], playbook_dir: Path) -> None:
        """A literal `src` is checked when the playbook loads, before any host is
        contacted: a regular file of at most MAX_COPY_SOURCE_BYTES (nothing is read)."""
        src = args.get("src")
        if isinstance(src, str) and not is_template(src):
            source = cls.local_source(src, playbook_dir)
            try:
                with open_input_file(source, what="copy source",
                                     limit=MAX_COPY_SOURCE_BYTES):
                    pass
            except InputError as err:
                raise ModuleError(f"{source}: {err.reason}", field="src") from None

    def run(self, ctx: ModuleContext, args: Any) -> ModuleResult:
        if args.content is not None:
            data: bytes = args.content.encode()
        else:
            source = self.local_source(args.src, ctx.playbook_dir)
            try:
                data = read_input_bytes(source, limit=MAX_COPY_SOURCE_BYTES,
                                        what="copy source")
            except InputError as err:
                raise ModuleError(f"copy: {source}: {err.reason}") from None
        change = put_file(ctx.conn, args.dest, data, mode=args.mode, owner=args.owner,
                          group=args.group, check=ctx.check, want_before=ctx.diff,
                          become=ctx.become)
        try:
            after: Optional[str] = data.decode("utf-8")
        except UnicodeDecodeError:
            after = None
        return _file_result(ctx, change, after, args.dest)


FILE_SCRIPT = r"""
p=$1 state=$2 mode=$3 owner=$4 group=$5 check=$6
kind=none
if [ -L "$p" ]; then kind=link; elif [ -d "$p" ]; then kind=directory
elif [ -e "$p" ]; then kind=file; fi
changed=0 created=0
fail() { echo "error=$1"; exit 2; }
case $state in
  absent)
    if [ "$kind" != none ]; then
      changed=1
      if [ "$check" = 0 ]; then rm -rf -- "$p" || fail "cannot remove"; fi
    fi
    echo "kind=$kind"; echo "changed=$changed"; exit 0 ;;
  directory)
    if [ "$kind" = none ]; then
      changed=1 created=1
      if [ "$check" = 0 ]; then mkdir -p -- "$p" || fail "cannot create directory"; fi
    elif [ "$kind" != directory ]; then fail "exists and is not a directory ($kind)"; fi ;;
  file)
    if [ "$kind" = none ]; then fail "does not exist (use state: touch to create it)"; fi
    if [ "$kind" = directory ]; then fail "is a directory"; fi ;;
  touch)
    if [ "$kind" = none ]; then
      changed=1 created=1
      if [ "$check" = 0 ]; then (umask 022; : > "$p") || fail "cannot create file"; fi
    elif [ "$kind" = directory ]; then fail "is a directory"; fi ;;
esac
before=
if [ "$created" = 0 ] || [ "$check" = 0 ]; then
  set -- $(stat -L -c '%a %U %G %u %g' -- "$p")
  before="$1 $2:$3"
  if [ -n "$mode" ] && [ "$mode" != "$1" ]; then
    changed=1; [ "$check" = 1 ] || chmod -- "$mode" "$p" || fail "chmod failed"
  fi
  if [ -n "$owner" ] && [ "$owner" != "$2" ] && [ "$owner" != "$4" ]; then
    changed=1; [ "$check" = 1 ] || chown -- "$owner" "$p" || fail "chown failed"
  fi
  if [ -n "$group" ] && [ "$group" != "$3" ] && [ "$group" != "$5" ]; then
    changed=1; [ "$check" = 1 ] || chgrp -- "$group" "$p" || fail "chgrp failed"
  fi
fi
echo "kind=$kind"
echo "before=$before"
echo "changed=$changed"
"""


def _script_fields(res: "CommandResult", path: str
                   ) -> tuple[dict[str, str], Optional[ModuleResult]]:
    """The fields a file script printed, and the result to return instead when it failed
    (an error it reported, or no answer)."""
    fields = parse_fields(res.stdout)
    if "error" in fields:
        return fields, ModuleResult(failed=True, msg=f"{path}: {fields['error']}")
    if not res.ok or "changed" not in fields:
        return fields, ModuleResult.from_command(res, changed=False)
    return fields, None


def _run_file_script(ctx: ModuleContext, path: str, state: str, args: Any) -> ModuleResult:
    res = ctx.run_shell(FILE_SCRIPT, [path, state, args.mode or "", args.owner or "",
                                      args.group or "", "1" if ctx.check else "0"])
    fields, failed = _script_fields(res, path)
    if failed is not None:
        return failed
    changed = fields["changed"] == "1"
    msg = ""
    if changed:
        msg = ("would " if ctx.check else "") + (
            f"remove {fields.get('kind')}" if state == "absent" else
            f"create {state if state != 'touch' else 'file'}" if fields.get("kind") == "none"
            else f"set mode/owner (was {fields.get('before')})")
    diffs = [FileDiff(path=path, before=None, after=None, note=msg)] if changed and ctx.diff \
        else []
    return ModuleResult(changed=changed, msg=msg, diffs=diffs,
                        data={"path": path, "state": state, "before": fields.get("before")})


@register_module("file")
class FileModule(Module):
    """Ensure a path is a file (state: file|touch), a directory, or absent; mode and owner."""

    class Args(_FileArgs):
        path: str
        state: Literal["file", "directory", "absent", "touch"] = "file"

        _path = field_validator("path")(lambda v: remote_path(v))

    def run(self, ctx: ModuleContext, args: Any) -> ModuleResult:
        return _run_file_script(ctx, args.path, args.state, args)


@register_module("directory")
class DirectoryModule(Module):
    """Ensure a directory exists (parents too) with mode and owner, or is absent."""

    class Args(_FileArgs):
        path: str
        state: Literal["present", "absent"] = "present"

        _path = field_validator("path")(lambda v: remote_path(v))

    def run(self, ctx: ModuleContext, args: Any) -> ModuleResult:
        return _run_file_script(ctx, args.path,
                                "directory" if args.state == "present" else "absent", args)


SYMLINK_SCRIPT = r"""
p=$1 target=$2 force=$3 check=$4
fail() { echo "error=$1"; exit 2; }
current=
if [ -L "$p" ]; then
  current=$(readlink -- "$p")
  if [ "$current" = "$target" ]; then echo "before=$current"; echo "changed=0"; exit 0; fi
elif [ -d "$p" ]; then fail "is a directory, not a symlink"
elif [ -e "$p" ] && [ "$force" != 1 ]; then fail "exists and is not a symlink (force: true replaces it)"
fi
echo "before=$current"
echo "changed=1"
[ "$check" = 1 ] && exit 0
dir=$(dirname -- "$p")
[ -d "$dir" ] || fail "parent directory $dir does not exist"
tmp="$dir/.ascendctl-link.$$"
rm -f -- "$tmp"
ln -s -- "$target" "$tmp" || fail "ln failed"
# rename(2) over the old link: readers see the old target or the new one, never nothing.
mv -f -T -- "$tmp" "$p" || { rm -f -- "$tmp"; fail "mv failed"; }
"""


@register_module("symlink")
class SymlinkModule(Module):
    """Point `path` at `src` with an atomic switch (ln -s to a temp name, then mv -T)."""

    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")
        path: str
        src: str
        force: bool = False

        _path = field_validator("path")(lambda v: remote_path(v))

        @field_validator("src")
        @classmethod
        def _src(cls, value: str) -> str:
            if not value or any(ord(ch) < 32 for ch in value):
                raise ValueError("must be a non-empty path without control characters")
            return value

    def run(self, ctx: ModuleContext, args: Any) -> ModuleResult:
        res = ctx.run_shell(SYMLINK_SCRIPT, [args.path, args.src, "1" if args.force else "0",
                                             "1" if ctx.check else "0"])
        fields, failed = _script_fields(res, args.path)
        if failed is not None:
            return failed
        changed = fields["changed"] == "1"
        before = fields.get("before") or None
        msg = ""
        if changed:
            msg = ("would point" if ctx.check else "points") + f" to {args.src}" + (
                f" (was {before})" if before else "")
        diffs = [FileDiff(path=args.path, before=f"-> {before}\n" if before else None,
                          after=f"-> {args.src}\n")] if changed and ctx.diff else []
        return ModuleResult(changed=changed, msg=msg, diffs=diffs,
                            data={"path": args.path, "src": args.src, "before": before})
