"""Where the benchmarks keep their figures: bench/results/ (gitignored), one JSON per run
(stamped) plus `<name>-latest.json`."""

from __future__ import annotations

import json
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def save_results(name: str, data: object) -> Path:
    """Write DATA as bench/results/<name>-<UTC stamp>.json and <name>-latest.json."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=2) + "\n"
    out = RESULTS / f"{name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(text)
    (RESULTS / f"{name}-latest.json").write_text(text)
    return out
