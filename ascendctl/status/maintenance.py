"""A node's maintenance record (runtime/ascendctl_runtime/maintenance.py) in words."""

from __future__ import annotations

import time
from typing import Any, Optional


def describe(record: Optional[dict[str, Any]]) -> str:
    if not record:
        return ""
    since = record.get("since")
    when = (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(since)))
            if isinstance(since, (int, float)) else "?")
    text = f"{record.get('state')} since {when} by {record.get('by')}: {record.get('reason')}"
    if record.get("evidence"):
        text += f" (evidence: {record['evidence']})"
    return text
