"""Promotion evidence on a serving group's head (standard library only; sent over SSH).

Each promotion gate run (regression, long_tail, soak, envelope; docs/promotion.md) leaves
one evidence record, and optionally its pictures as one self-contained HTML page
(ascendctl/gates/pictures.py):

    <root>/promotion/<release>/<stamp>.json    the record (written atomically)
    <root>/promotion/<release>/<stamp>.html    its pictures, when given
    <root>/history.jsonl                       plus the caller's event, with "file"

Not inside releases/<id>/ (a release directory's files are its content, hashed to tell
whether a deploy changes anything); the records of pruned releases go with them.

Operations (each one JSON call, one JSON answer; shipped by ascendctl/transport/nodecall.py):

    store     a record (and its page) plus one history event
    list      the stored records' summaries by release (oldest first), for `ascendctl history`
    envelope  the envelope of the newest passing envelope record of a release
"""

from __future__ import annotations

import json
import os
import re
import shutil
from typing import Any, Optional

from ascendctl_runtime import layout
from ascendctl_runtime.healthstore import read_json
from ascendctl_runtime.nodeutil import answer_call, write_atomic

STAMP_RE = re.compile(r"^[0-9]{8}T[0-9]{6}Z(-[0-9a-f]{4})?$")
ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
DIRECTORY = "promotion"
# What `list` keeps of a record (the requests, samples and answers stay on the node).
SUMMARY_KEYS = ("release", "stamp", "time", "by", "node", "group", "gate", "status",
                "summary", "envelope", "previous")


def _release_id(release: Any) -> str:
    if not isinstance(release, str) or not ID_RE.fullmatch(release):
        raise ValueError(f"bad release id {release!r}")
    return release


def _stamp(stamp: Any) -> str:
    if not isinstance(stamp, str) or not STAMP_RE.fullmatch(stamp):
        raise ValueError(f"bad stamp {stamp!r}")
    return stamp


def _promotion_dir(root: str, release: str) -> str:
    return os.path.join(root, DIRECTORY, _release_id(release))


def _stamps(directory: str) -> list[str]:
    """The stamps of the records in DIRECTORY, oldest first."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(n[:-5] for n in names if n.endswith(".json") and STAMP_RE.fullmatch(n[:-5]))


def store(root: str, release: str, stamp: str, record: dict[str, Any], html: Optional[str],
          event: dict[str, Any]) -> dict[str, Any]:
    """RECORD (and HTML, its page) as RELEASE's evidence of STAMP, plus EVENT in history."""
    directory = _promotion_dir(root, release)
    _stamp(stamp)
    if not isinstance(record, dict) or not isinstance(event, dict):
        raise ValueError("the record and the event are JSON objects")
    if html is not None and not isinstance(html, str):
        raise ValueError("the page is text")
    json_path = os.path.join(directory, f"{stamp}.json")
    html_path = os.path.join(directory, f"{stamp}.html") if html is not None else None
    # the page first: a listed record never names a page still being written
    if html_path is not None and html is not None:
        write_atomic(html_path, html.encode("utf-8", "replace"))
    write_atomic(json_path, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())
    with open(os.path.join(root, layout.HISTORY_FILE), "a", encoding="utf-8") as handle:
        handle.write(json.dumps({**event, "file": json_path}, sort_keys=True) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    prune(root, keep=release)
    return {"path": json_path, "html": html_path}


def prune(root: str, keep: Optional[str] = None) -> list[str]:
    """Remove the evidence of releases no longer under releases/ (but KEEP's)."""
    base = os.path.join(root, DIRECTORY)
    releases = os.path.join(root, layout.RELEASES_DIR)
    removed = []
    for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        if name == keep or not ID_RE.fullmatch(name):
            continue
        if not os.path.isdir(os.path.join(releases, name)):
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)
            removed.append(name)
    return removed


def summary_of(record: dict[str, Any], json_path: str) -> dict[str, Any]:
    summary = {key: record.get(key) for key in SUMMARY_KEYS}
    html_path = json_path[:-5] + ".html"
    summary["file"] = json_path
    summary["html"] = html_path if os.path.isfile(html_path) else None
    return summary


def list_records(root: str, per_release: int = 5, latest_per_gate: bool = False
                 ) -> dict[str, Any]:
    """{"records": {release: [summary, ...]}}, oldest first: each release's newest
    PER_RELEASE records, or with LATEST_PER_GATE the newest record of each gate (what
    `history` shows). Unreadable records are skipped."""
    per_release = max(1, int(per_release))
    base = os.path.join(root, DIRECTORY)
    records: dict[str, list[dict[str, Any]]] = {}
    for release in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        directory = os.path.join(base, release)
        if not ID_RE.fullmatch(release) or not os.path.isdir(directory):
            continue
        found: list[dict[str, Any]] = []
        gates: set[Any] = set()
        for stamp in reversed(_stamps(directory)):
            path = os.path.join(directory, f"{stamp}.json")
            record = read_json(path)
            if record is None:
                continue
            if latest_per_gate:
                if record.get("gate") in gates:
                    continue
                gates.add(record.get("gate"))
            found.append(summary_of(record, path))
            if not latest_per_gate and len(found) >= per_release:
                break
        if found:
            records[release] = found[::-1]
    return {"records": records}


def latest_record(root: str, release: str, gate: str, passed_only: bool = True
                  ) -> Optional[dict[str, Any]]:
    """RELEASE's newest record of GATE (only a passing one with PASSED_ONLY), whole."""
    directory = _promotion_dir(root, release)
    for stamp in reversed(_stamps(directory)):
        record = read_json(os.path.join(directory, f"{stamp}.json"))
        if record is None or record.get("gate") != gate:
            continue
        if passed_only and record.get("status") != "pass":
            continue
        return record
    return None


def envelope_of(root: str, release: str) -> Optional[int]:
    """The envelope of RELEASE's newest passing envelope record, or None."""
    directory = _promotion_dir(root, release)
    for stamp in reversed(_stamps(directory)):
        record = read_json(os.path.join(directory, f"{stamp}.json"))
        if record is None or record.get("gate") != "envelope" or record.get("status") != "pass":
            continue
        value = record.get("envelope")
        return value if isinstance(value, int) and not isinstance(value, bool) \
            and value > 0 else None
    return None


def op_envelope(root: str, release: str) -> dict[str, Any]:
    return {"envelope": envelope_of(root, release)}


OPERATIONS = {"store": store, "list": list_records, "envelope": op_envelope}


def run_call(payload: bytes) -> int:
    return answer_call(payload, OPERATIONS)
