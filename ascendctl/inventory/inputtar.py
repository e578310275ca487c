"""Reading tar archives the operator hands us, with every cost bounded.

Only headers are parsed until a member is asked for, and a member is read (or hashed)
as a stream, at most a given number of bytes. Refused, as an InputError naming the file:

- more members than a limit (counted as they are read; `keep=False` also drops each
  header once it is passed, so a huge layer costs no memory);
- member names that are absolute or climb out with `..`, and links pointing out;
- extended headers (pax, GNU long names) larger than 1 MiB, chained more than 8 deep
  (tarfile parses a chain by recursion), or global ones adding up to more than 1 MiB:
  tarfile reads a whole extended header into memory before we see the member;
- GNU sparse members (tarfile reads their maps without bound; image tars have none);
- whatever tarfile, gzip or zlib raise on a truncated or corrupt stream.
"""

from __future__ import annotations

import gzip
import hashlib
import posixpath
import tarfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from ascendctl.errors import InputError
from ascendctl.inventory.inputfile import read_capped, shown

MAX_META_BYTES = 1 << 20           # one pax / GNU long-name header
MAX_GLOBAL_BYTES = 1 << 20         # all pax global headers of one archive
MAX_META_CHAIN = 8                 # extended headers in front of one member
HASH_CHUNK = 1 << 20
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
META_TYPES = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE,
              tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)


class TarRefused(tarfile.TarError):
    """Raised from inside tarfile's header parsing; `tar_errors` turns it into an
    InputError naming the archive."""


class BoundedTarInfo(tarfile.TarInfo):
    """TarInfo that refuses oversized extended headers before tarfile reads them.
    `_proc_member` is tarfile's documented hook for subclasses (see its comment)."""

    def _proc_member(self, tar: Any) -> Any:
        if self.type == tarfile.GNUTYPE_SPARSE:
            raise TarRefused(f"a GNU sparse member {shown(self.name)}")
        if self.type not in META_TYPES:
            return super()._proc_member(tar)  # type: ignore[misc]
        if self.size > MAX_META_BYTES:
            raise TarRefused(f"an extended header of {self.size} bytes (limit "
                             f"{MAX_META_BYTES})")
        if self.type == tarfile.XGLTYPE:
            tar.ascendctl_global_bytes = getattr(tar, "ascendctl_global_bytes", 0) + self.size
            if tar.ascendctl_global_bytes > MAX_GLOBAL_BYTES:
                raise TarRefused(f"global extended headers of more than {MAX_GLOBAL_BYTES} "
                                 "bytes")
        depth = getattr(tar, "ascendctl_meta_depth", 0)
        if depth >= MAX_META_CHAIN:
            raise TarRefused(f"more than {MAX_META_CHAIN} extended headers in a row")
        tar.ascendctl_meta_depth = depth + 1
        try:
            return super()._proc_member(tar)  # type: ignore[misc]
        finally:
            tar.ascendctl_meta_depth = depth

    def _refuse_sparse(self, *args: Any) -> None:
        raise TarRefused("a GNU sparse member (pax sparse headers)")

    _proc_gnusparse_00 = _proc_gnusparse_01 = _proc_gnusparse_10 = _refuse_sparse


@contextmanager
def tar_errors(file: str, what: str, field: str | None = None) -> Iterator[None]:
    """Every way reading a tar can fail, as one InputError naming FILE."""
    try:
        yield
    except TarRefused as err:
        raise InputError(f"{what} holds {err}", file=file, field=field) from None
    except (tarfile.TarError, EOFError, zlib.error, OSError, ValueError, RecursionError,
            UnicodeError) as err:
        detail = str(err) or type(err).__name__
        raise InputError(f"{what} is not a readable tar (truncated or corrupt): "
                         f"{detail[:200]}", file=file, field=field) from None


def compression(head: bytes) -> str | None:
    """"gzip", "zstd" or None (uncompressed, or not an archive at all) from the first bytes."""
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return None


def open_tar(handle: IO[bytes], *, gzipped: bool = False, seekable: bool = True) -> tarfile.TarFile:
    """A TarFile over HANDLE for reading with bounded headers: random access when it is a
    seekable uncompressed file, else one pass in order (gzip, or a member of a stream)."""
    if gzipped:
        handle = gzip.GzipFile(fileobj=handle, mode="rb")  # type: ignore[assignment]
        seekable = False
    return tarfile.open(fileobj=handle, mode="r:" if seekable else "r|",
                        tarinfo=BoundedTarInfo)


def member_name(name: str, *, file: str, what: str, field: str | None = None) -> str:
    """NAME normalised ("./a//b" -> "a/b"), refused when absolute or climbing out."""
    if name.startswith("/") or name == ".." or name.startswith("../") or \
            "/../" in name or name.endswith("/.."):
        raise InputError(f"{what} member {shown(name)} escapes the archive (absolute or "
                         "`..`)", file=file, field=field)
    if name and "//" not in name and "/./" not in name and not name.startswith("./") and \
            not name.endswith(("/", "/.")):
        return name                    # already normal: the common case, kept cheap
    return posixpath.normpath(name) if name else "."


def link_target(member: tarfile.TarInfo, name: str, *, file: str, what: str,
                field: str | None = None) -> str:
    """The member a symlink or hardlink NAME points to, normalised; refused when it
    points out of the archive."""
    target = member.linkname
    if member.issym():
        if target.startswith("/"):
            raise InputError(f"{what} member {shown(name)} is a symlink to the absolute "
                             f"path {shown(target)}", file=file, field=field)
        target = posixpath.join(posixpath.dirname(name), target)
    normal = posixpath.normpath(target) if target else "."
    if normal == ".." or normal.startswith("../") or normal.startswith("/"):
        raise InputError(f"{what} member {shown(name)} links to {shown(member.linkname)}, "
                         "out of the archive", file=file, field=field)
    return normal


def members(tar: tarfile.TarFile, *, limit: int, file: str, what: str,
            field: str | None = None, keep: bool = True) -> Iterator[tarfile.TarInfo]:
    """The members in archive order, at most LIMIT of them (more is refused).
    keep=False forgets each header once it is passed (one pass over a big tar): tarfile
    appends every header it reads to `members`, which typeshed does not declare."""
    count = 0
    while True:
        member = tar.next()
        if member is None:
            return
        count += 1
        if count > limit:
            raise InputError(f"{what} has more than {limit} members", file=file, field=field)
        if not keep:
            tar.members.clear()  # type: ignore[attr-defined]
        yield member


def read_member(tar: tarfile.TarFile, member: tarfile.TarInfo, *, limit: int, file: str,
                what: str, field: str | None = None) -> bytes:
    """The data of a regular-file MEMBER, refused beyond LIMIT bytes (by its header, and
    again while reading)."""
    if member.size > limit:
        raise InputError(f"{what} is {member.size} bytes (limit {limit})", file=file,
                         field=field)
    stream = tar.extractfile(member)
    if stream is None:
        raise InputError(f"{what} is not a regular file", file=file, field=field)
    return read_capped(stream, limit, file=file, what=what, field=field)


def stream_digest(stream: IO[bytes], head: bytes = b"") -> str:
    """sha256:<hex> of HEAD followed by the rest of STREAM, read in chunks."""
    digest = hashlib.sha256(head)
    for block in iter(lambda: stream.read(HASH_CHUNK), b""):
        digest.update(block)
    return "sha256:" + digest.hexdigest()
