"""A promotion gate's evidence record (runtime/ascendctl_runtime/promotion_store.py) as one
self-contained HTML page: inline SVG, no JavaScript, nothing fetched from anywhere. Pure:
every figure drawn comes from the record.

- latency over time: each request's end-to-end latency (dots) and TTFT (hollow squares)
  against its start, one colour per release; failed requests are red crosses (at their
  latency, or on the top edge when they have none);
- a histogram of the end-to-end latencies, one series per release;
- a soak's time series (host RSS, HBM, generation tokens, requests running), one small
  chart each, with red lines where the engine restarted or the gang recovered;
- an envelope's latency percentiles per concurrency level, failed levels shaded red;
- the failing answers and the verdict, as text.

Every text from the record is escaped (and characters a page should not carry shown as
\\uXXXX); a series over MAX_POINTS marks is thinned deterministically (evenly spaced
requests, min and max of each bucket of samples), and the page says so.
"""

from __future__ import annotations

import html
import json
import math
import re
from typing import Any, Optional, Sequence

MAX_POINTS = 4000          # marks per series
MAX_SERIES = 8             # releases drawn
MAX_ANSWERS = 100          # failing answers listed
ANSWER_CHARS = 2000
FINDINGS_CHARS = 500
JSON_CHARS = 20_000        # of the verdict and the profile
MAX_EVENT_LINES = 200      # restart lines in a soak chart
MAX_BINS = 40
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#bcbd22")
FAILED = "#d62728"
PERCENTILES = ((50, "#9ecae1", ""), (90, "#4292c6", "6 3"), (99, "#08306b", ""))
SOAK_SERIES = (("rss_mib", "host RSS", "MiB"), ("hbm_used_mib", "HBM used", "MiB"),
               ("generation_tokens_total", "generation tokens", "tokens"),
               ("requests_running", "requests running", "requests"))
# C0/C1 controls (not tab, newline, carriage return), DEL, lone surrogates, non-characters,
# bidirectional overrides and isolates: shown as \uXXXX, never carried into the page
UNSAFE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff"
                    "\u202a-\u202e\u2066-\u2069]")

Point = tuple[float, float]


# -- text and numbers -------------------------------------------------------------------------

def text(value: Any) -> str:
    """VALUE as HTML/XML text: escaped, unsafe characters spelt out, no `scheme://`."""
    raw = value if isinstance(value, str) else str(value)
    raw = UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", raw)
    return html.escape(raw, quote=True).replace("://", "&#58;//")


def number(value: Any) -> Optional[float]:
    """A finite number, else None (booleans are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def fmt(value: Optional[float], digits: int = 1) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1e6:
        return f"{value:.3g}"
    return f"{value:.{digits}f}".rstrip("0").rstrip(".") if digits else f"{value:.0f}"


def percentile(values: Sequence[float], p: float) -> Optional[float]:
    """Nearest-rank percentile P of VALUES (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [LOW, HIGH] (steps of 1, 2 or 5 × 10^k)."""
    if not high > low:
        return [low]
    rough = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(rough))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= rough)
    first = math.ceil(low / step - 1e-9)
    ticks: list[float] = []
    k = first
    while k * step <= high * (1 + 1e-9) + 1e-12 and len(ticks) < 50:
        ticks.append(round(k * step, 12))
        k += 1
    return ticks


def tick_label(value: float) -> str:
    if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
        return f"{value:.3g}"
    return f"{value:.6f}".rstrip("0").rstrip(".")


def downsample(items: Sequence[Any], limit: int = MAX_POINTS) -> list[Any]:
    """At most LIMIT of ITEMS, evenly spaced, first and last kept (all when they fit)."""
    n = len(items)
    if n <= limit:
        return list(items)
    if limit <= 1:
        return list(items[:limit])
    return [items[(k * (n - 1)) // (limit - 1)] for k in range(limit)]


def downsample_series(points: Sequence[Point], limit: int = MAX_POINTS) -> list[Point]:
    """At most LIMIT points of a time series: the lowest and highest of each of LIMIT/2
    buckets, in time order (spikes survive; evenly spaced picks would drop them)."""
    n = len(points)
    if n <= limit:
        return list(points)
    buckets = max(1, limit // 2)
    kept: list[Point] = []
    for b in range(buckets):
        chunk = points[b * n // buckets:(b + 1) * n // buckets]
        if not chunk:
            continue
        low = min(range(len(chunk)), key=lambda i: (chunk[i][1], i))
        high = max(range(len(chunk)), key=lambda i: (chunk[i][1], -i))
        kept.extend(chunk[i] for i in sorted({low, high}))
    return kept


def c(value: float) -> str:
    """A coordinate."""
    return f"{value:.1f}"


# -- a chart frame ------------------------------------------------------------------------------

class Frame:
    """Scales and axes of one chart; SVG elements are collected in `body`."""

    def __init__(self, width: int, height: int, x_range: tuple[float, float],
                 y_range: tuple[float, float], x_label: str, y_label: str, title: str):
        self.width, self.height = width, height
        self.left, self.right, self.top, self.bottom = 64, 16, 26, 46
        self.x0, self.x1 = x_range if x_range[1] > x_range[0] else (x_range[0], x_range[0] + 1)
        self.y0, self.y1 = y_range if y_range[1] > y_range[0] else (y_range[0], y_range[0] + 1)
        self.x_label, self.y_label, self.title = x_label, y_label, title
        self.body: list[str] = []

    def x(self, value: float) -> float:
        span = self.width - self.left - self.right
        return self.left + (value - self.x0) / (self.x1 - self.x0) * span

    def y(self, value: float) -> float:
        span = self.height - self.top - self.bottom
        return self.height - self.bottom - (value - self.y0) / (self.y1 - self.y0) * span

    def axes(self, x_ticks: Optional[list[tuple[float, str]]] = None) -> list[str]:
        bottom, left = self.height - self.bottom, self.left
        right, top = self.width - self.right, self.top
        out = [f'<text x="{left}" y="16" class="title">{text(self.title)}</text>',
               f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" class="axis"/>',
               f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" class="axis"/>']
        for value in nice_ticks(self.y0, self.y1):
            y = c(self.y(value))
            out.append(f'<line x1="{left - 4}" y1="{y}" x2="{right}" y2="{y}" class="grid"/>'
                       f'<text x="{left - 6}" y="{y}" class="ytick">{tick_label(value)}</text>')
        ticks = x_ticks if x_ticks is not None else \
            [(v, tick_label(v)) for v in nice_ticks(self.x0, self.x1, 8)]
        for value, label in ticks:
            x = c(self.x(value))
            out.append(f'<line x1="{x}" y1="{bottom}" x2="{x}" y2="{bottom + 4}" class="axis"/>'
                       f'<text x="{x}" y="{bottom + 16}" class="xtick">{text(label)}</text>')
        out.append(f'<text x="{(left + right) / 2:.1f}" y="{self.height - 8}" '
                   f'class="xlabel">{text(self.x_label)}</text>')
        out.append(f'<text x="14" y="{(top + bottom) / 2:.1f}" class="ylabel" '
                   f'transform="rotate(-90 14 {(top + bottom) / 2:.1f})">'
                   f'{text(self.y_label)}</text>')
        return out

    def svg(self, css_class: str, x_ticks: Optional[list[tuple[float, str]]] = None) -> str:
        return (f'<svg class="{css_class}" width="{self.width}" height="{self.height}" '
                f'viewBox="0 0 {self.width} {self.height}" role="img">'
                f'<title>{text(self.title)}</title>'
                + "".join(self.axes(x_ticks)) + "".join(self.body) + "</svg>")


# -- the record's requests ------------------------------------------------------------------------

class Series:
    """One release's requests: those with figures, the failed ones, the rest skipped."""

    def __init__(self, release: str, colour: str, requests: Any):
        self.release, self.colour = release, colour
        self.ok: list[dict[str, Any]] = []
        self.failed: list[dict[str, Any]] = []
        self.skipped = 0
        rows = requests if isinstance(requests, list) else []
        keyed = []
        for index, row in enumerate(rows):
            if not isinstance(row, dict) or number(row.get("start_s")) is None:
                self.skipped += 1
                continue
            keyed.append((number(row.get("start_s")), index, row))
        keyed.sort(key=lambda item: (item[0], item[1]))
        for _start, _index, row in keyed:
            if row.get("error"):
                self.failed.append(row)
            elif number(row.get("e2e_ms")) is not None:
                self.ok.append(row)
            else:
                self.skipped += 1

    @property
    def total(self) -> int:
        return len(self.ok) + len(self.failed) + self.skipped

    def drawn(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The requests drawn: at most MAX_POINTS, failed ones kept first (a quarter)."""
        failed = downsample(self.failed, MAX_POINTS // 4)
        return downsample(self.ok, MAX_POINTS - len(failed)), failed

    def e2e(self) -> list[float]:
        return [v for v in (number(r.get("e2e_ms")) for r in self.ok) if v is not None]


def release_series(record: dict[str, Any]) -> list[Series]:
    """The candidate first, then the previous release, then any other (at most MAX_SERIES)."""
    requests = record.get("requests")
    if not isinstance(requests, dict):
        return []
    names = [str(name) for name in requests]
    order = [n for n in (record.get("release"), record.get("previous")) if n in names]
    order += sorted(n for n in names if n not in order)
    return [Series(name, PALETTE[i % len(PALETTE)], requests[name])
            for i, name in enumerate(order[:MAX_SERIES])]


def role(record: dict[str, Any], release: str) -> str:
    if release == record.get("release"):
        return " (candidate)"
    if release == record.get("previous"):
        return " (previous)"
    return ""


def legend(record: dict[str, Any], series: list[Series], extra: str = "") -> str:
    items = "".join(f'<span class="key"><span class="swatch" style="background:{s.colour}">'
                    f'</span>{text(s.release)}{text(role(record, s.release))}</span>'
                    for s in series)
    return f'<p class="legend">{items}{extra}</p>'


def failure_title(release: str, row: dict[str, Any]) -> str:
    return (f"{release} request {row.get('i')} failed at {fmt(number(row.get('start_s')), 3)} s"
            f": {str(row.get('error'))[:300]}")


def latency_chart(record: dict[str, Any], series: list[Series]) -> str:
    drawn = [(s, *s.drawn()) for s in series]
    starts = [number(r.get("start_s")) or 0.0 for _s, ok, failed in drawn for r in ok + failed]
    values = [v for _s, ok, failed in drawn for r in ok + failed
              for v in (number(r.get("e2e_ms")), number(r.get("ttft_ms"))) if v is not None]
    top = max(values, default=1.0) * 1.05
    frame = Frame(900, 340, (min(starts, default=0.0), max(starts, default=1.0)), (0.0, top),
                  "request start (s)", "latency (ms)", "latency over time")
    # the candidate is drawn last, on top
    for s, ok, failed in reversed(drawn):
        marks = [f'<g class="series" data-release="{text(s.release)}" fill="{s.colour}" '
                 f'stroke="{s.colour}">']
        for row in ok:
            at = frame.x(number(row.get("start_s")) or 0.0)
            ttft = number(row.get("ttft_ms"))
            if ttft is not None:
                marks.append(f'<rect class="ttft" x="{at - 1.5:.1f}" '
                             f'y="{frame.y(ttft) - 1.5:.1f}" width="3" height="3"/>')
            marks.append(f'<circle class="req" cx="{c(at)}" '
                         f'cy="{c(frame.y(number(row.get("e2e_ms")) or 0.0))}" r="2"/>')
        for row in failed:
            at, e2e = frame.x(number(row.get("start_s")) or 0.0), number(row.get("e2e_ms"))
            y = frame.y(e2e) if e2e is not None else frame.top + 4
            marks.append(f'<path class="req failed" d="M{at - 3.5:.1f} {y - 3.5:.1f}l7 7'
                         f'm0 -7l-7 7"><title>{text(failure_title(s.release, row))}</title>'
                         f'</path>')
        marks.append("</g>")
        frame.body.extend(marks)
    notes = []
    for s, ok, failed in drawn:
        line = (f"{s.release}: {s.total} requests, {len(s.failed)} failed")
        if len(ok) + len(failed) < len(s.ok) + len(s.failed):
            line += f"; {len(ok)} of {len(s.ok)} answered and {len(failed)} of " \
                    f"{len(s.failed)} failed drawn (evenly spaced)"
        if s.skipped:
            line += f"; {s.skipped} without figures not drawn"
        notes.append(f"<li>{text(line)}</li>")
    key = ('<span class="key">● end-to-end</span><span class="key">□ TTFT</span>'
           f'<span class="key" style="color:{FAILED}">× failed</span>')
    return (frame.svg("latency") + legend(record, series, key)
            + f'<ul class="notes">{"".join(notes)}</ul>')


def histogram_chart(record: dict[str, Any], series: list[Series]) -> str:
    values = {s.release: s.e2e() for s in series}
    every = [v for vs in values.values() for v in vs]
    if not every:
        return "<p>no answered request has an end-to-end latency</p>"
    low, high = min(every), max(every)
    if high <= low:
        high = low + 1.0
    bins = min(MAX_BINS, max(5, math.ceil(math.sqrt(max(len(v) for v in values.values())))))
    width = (high - low) / bins
    counts = {}
    for release, vs in values.items():
        row = [0] * bins
        for v in vs:
            row[min(bins - 1, int((v - low) / width))] += 1
        counts[release] = row
    frame = Frame(900, 300, (low, high), (0.0, max(max(r) for r in counts.values()) * 1.05),
                  "end-to-end latency (ms)", "requests", "end-to-end latency histogram")
    span = (frame.x(low + width) - frame.x(low)) * 0.9
    bar = span / len(series)
    for j, s in enumerate(series):
        frame.body.append(f'<g class="series" data-release="{text(s.release)}" '
                          f'fill="{s.colour}">')
        for i, count in enumerate(counts[s.release]):
            if not count:
                continue
            x = frame.x(low + i * width) + j * bar
            y = frame.y(count)
            frame.body.append(
                f'<rect class="bar" data-count="{count}" x="{x:.1f}" y="{y:.1f}" '
                f'width="{max(bar, 0.5):.1f}" height="{frame.y(0) - y:.1f}">'
                f'<title>{text(s.release)}: {count} in [{fmt(low + i * width)}, '
                f'{fmt(low + (i + 1) * width)}) ms</title></rect>')
        frame.body.append("</g>")
    return (frame.svg("histogram") + legend(record, series)
            + f"<p>{bins} bins of {text(fmt(width, 2))} ms; answered requests only</p>")


# -- soak -------------------------------------------------------------------------------------------

def soak_charts(samples: Any) -> str:
    rows = sorted(((number(s.get("t")), i, s) for i, s in enumerate(samples)
                   if isinstance(s, dict) and number(s.get("t")) is not None),
                  key=lambda item: (item[0], item[1]))
    if not rows:
        return "<p>no samples</p>"
    times = [t or 0.0 for t, _i, _s in rows]
    events: list[tuple[float, str]] = []
    before: Optional[dict[str, Any]] = None
    for t, _i, sample in rows:
        if before is not None:
            for key, what in (("engine_restarts", "engine restart"),
                              ("recoveries", "gang recovery")):
                now, then = number(sample.get(key)), number(before.get(key))
                if now is not None and then is not None and now > then:
                    events.append((t or 0.0, f"{what} by {fmt(t, 1)} s"))
            now, then = (number(sample.get("generation_tokens_total")),
                         number(before.get("generation_tokens_total")))
            if now is not None and then is not None and now < then:
                events.append((t or 0.0, f"generation tokens fell at {fmt(t, 1)} s (a new "
                                         "engine process)"))
        before = sample
    shown_events = downsample(events, MAX_EVENT_LINES)
    panels = []
    for key, label, unit in SOAK_SERIES:
        points = [(t or 0.0, v) for t, _i, s in rows
                  for v in [number(s.get(key))] if v is not None]
        if not points:
            panels.append(f'<div class="panel"><p>{text(label)}: not sampled</p></div>')
            continue
        kept = downsample_series(points)
        low, high = min(v for _t, v in points), max(v for _t, v in points)
        pad = (high - low) * 0.05 or max(abs(high) * 0.05, 1.0)
        frame = Frame(440, 220, (min(times), max(times)), (max(0.0, low - pad) if low >= 0
                                                           else low - pad, high + pad),
                      "time (s)", unit, label)
        for t, what in shown_events:
            x = c(frame.x(t))
            frame.body.append(f'<line class="restart" x1="{x}" y1="{frame.top}" x2="{x}" '
                              f'y2="{frame.height - frame.bottom}"><title>{text(what)}</title>'
                              f'</line>')
        line = " ".join(f"{c(frame.x(t))},{c(frame.y(v))}" for t, v in kept)
        frame.body.append(f'<polyline class="sample" data-key="{key}" data-points="{len(kept)}" '
                          f'points="{line}"/>')
        note = (f"{len(points)} samples" + (f", {len(kept)} drawn (lowest and highest of "
                                             f"each of {MAX_POINTS // 2} spans)"
                                             if len(kept) < len(points) else ""))
        panels.append(f'<div class="panel">{frame.svg("soak")}<p>{text(note)}</p></div>')
    summary = (f"{len(events)} restart or recovery event(s): "
               + "; ".join(what for _t, what in events[:20]) if events
               else "no engine restart or recovery during the soak")
    return f'<div class="panels">{"".join(panels)}</div><p>{text(summary)}</p>'


# -- envelope -------------------------------------------------------------------------------------

def level_figures(level: dict[str, Any]) -> dict[str, Any]:
    rows = [r for r in level.get("requests") or [] if isinstance(r, dict)]
    ok = [r for r in rows if not r.get("error")]
    e2e = [v for v in (number(r.get("e2e_ms")) for r in ok) if v is not None]
    ttft = [v for v in (number(r.get("ttft_ms")) for r in ok) if v is not None]
    reasons = level.get("reasons")
    return {"concurrency": number(level.get("concurrency")),
            "held": level.get("held") is True,
            "requests": len(rows), "failed": len(rows) - len(ok),
            "e2e": {p: percentile(e2e, p) for p, _c, _d in PERCENTILES},
            "p99_ttft": percentile(ttft, 99),
            "reasons": [str(r) for r in reasons] if isinstance(reasons, list)
            else ([str(reasons)] if reasons else [])}


def envelope_chart(record: dict[str, Any]) -> str:
    levels = [level_figures(level) for level in record.get("levels") or []
              if isinstance(level, dict)]
    levels = sorted((f for f in levels if f["concurrency"] is not None),
                    key=lambda f: f["concurrency"])[:MAX_POINTS]
    if not levels:
        return "<p>no levels</p>"
    values = [v for f in levels for v in f["e2e"].values() if v is not None]
    frame = Frame(900, 320, (-0.5, len(levels) - 0.5), (0.0, max(values, default=1.0) * 1.05),
                  "concurrency (requests in flight)", "end-to-end latency (ms)",
                  "latency percentiles per concurrency level")
    step = frame.x(1) - frame.x(0)
    envelope = number(record.get("envelope"))
    for i, f in enumerate(levels):
        if not f["held"]:
            why = "; ".join(f["reasons"]) or "did not hold"
            what = f"concurrency {fmt(f['concurrency'])} failed: {why}"
            frame.body.append(
                f'<rect class="failed-level" x="{frame.x(i) - step / 2:.1f}" y="{frame.top}" '
                f'width="{step:.1f}" height="{frame.height - frame.top - frame.bottom}">'
                f'<title>{text(what)}</title>'
                f'</rect>')
        if envelope is not None and f["concurrency"] == envelope:
            x = c(frame.x(i))
            frame.body.append(f'<line class="envelope-mark" x1="{x}" y1="{frame.top}" x2="{x}" '
                              f'y2="{frame.height - frame.bottom}"/>'
                              f'<text class="envelope-label" x="{float(x) + 4:.1f}" '
                              f'y="{frame.top + 12}">envelope {fmt(envelope)}</text>')
    for p, colour, dash in PERCENTILES:
        points = [(i, f["e2e"][p]) for i, f in enumerate(levels) if f["e2e"][p] is not None]
        if not points:
            continue
        dashes = f' stroke-dasharray="{dash}"' if dash else ""
        frame.body.append(f'<g class="percentile" data-p="{p}" stroke="{colour}" '
                          f'fill="{colour}"><polyline fill="none"{dashes} points="'
                          + " ".join(f"{c(frame.x(i))},{c(frame.y(v))}" for i, v in points)
                          + '"/>' + "".join(f'<circle cx="{c(frame.x(i))}" cy="{c(frame.y(v))}" '
                                            f'r="3"/>' for i, v in points) + "</g>")
    ticks = [(float(i), fmt(f["concurrency"])) for i, f in enumerate(levels)]
    key = "".join(f'<span class="key"><span class="swatch" style="background:{colour}">'
                  f'</span>p{p}</span>' for p, colour, _d in PERCENTILES)
    key += ('<span class="key"><span class="swatch failed-swatch"></span>level failed'
            '</span>')
    rows = "".join(
        f'<tr class="{"held" if f["held"] else "failed"}"><td>{text(fmt(f["concurrency"]))}</td>'
        f'<td>{"held" if f["held"] else "failed"}</td><td>{f["requests"]}</td>'
        f'<td>{f["failed"]}</td>'
        + "".join(f'<td>{text(fmt(f["e2e"][p]))}</td>' for p, _c, _d in PERCENTILES)
        + f'<td>{text(fmt(f["p99_ttft"]))}</td><td>{text("; ".join(f["reasons"]))}</td></tr>'
        for f in levels)
    head = ("<tr><th>concurrency</th><th>level</th><th>requests</th><th>failed</th>"
            + "".join(f"<th>p{p} e2e (ms)</th>" for p, _c, _d in PERCENTILES)
            + "<th>p99 TTFT (ms)</th><th>reasons</th></tr>")
    return (frame.svg("envelope", ticks) + f'<p class="legend">{key}</p>'
            + "<p>percentiles (nearest rank) of the answered requests' end-to-end latency</p>"
            + f"<table>{head}{rows}</table>")


# -- answers and the page -------------------------------------------------------------------------

def answers_table(answers: Any) -> str:
    rows = [a for a in answers if isinstance(a, dict)] if isinstance(answers, list) else []
    if not rows:
        return "<p>none</p>"
    out = []
    for answer in rows[:MAX_ANSWERS]:
        if answer.get("error"):
            why = str(answer.get("error"))
        else:
            findings = answer.get("findings")
            why = findings if isinstance(findings, str) else json.dumps(findings, sort_keys=True)
        body = str(answer.get("text") if answer.get("text") is not None else "")
        cut = len(body) > ANSWER_CHARS
        out.append(f"<tr><td>{text(answer.get('release'))}</td><td>{text(answer.get('i'))}</td>"
                   f"<td>{text(why[:FINDINGS_CHARS])}</td><td><pre>{text(body[:ANSWER_CHARS])}"
                   f"{' […]' if cut else ''}</pre></td></tr>")
    more = (f"<p>{len(rows) - MAX_ANSWERS} more failing answers are in the record</p>"
            if len(rows) > MAX_ANSWERS else "")
    return ("<table><tr><th>release</th><th>request</th><th>why</th><th>answer</th></tr>"
            + "".join(out) + "</table>" + more)


def json_block(label: str, value: Any, open_: bool = False) -> str:
    if value is None:
        return ""
    dumped = json.dumps(value, indent=1, sort_keys=True, default=str)
    if len(dumped) > JSON_CHARS:
        dumped = dumped[:JSON_CHARS] + "\n[…]"
    return (f"<details{' open' if open_ else ''}><summary>{text(label)}</summary>"
            f"<pre>{text(dumped)}</pre></details>")


STYLE = """
body{font-family:sans-serif;margin:1.5em;color:#222;max-width:1200px}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}
.pass{color:#2a7d2a}.fail{color:#d62728}
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ccc;padding:2px 6px;
vertical-align:top;text-align:left}tr.failed td{background:#fde8e8}
pre{white-space:pre-wrap;margin:0;max-width:60em}
svg text{font-size:11px;fill:#333}svg .title{font-size:13px;font-weight:bold}
svg .axis{stroke:#333}svg .grid{stroke:#e5e5e5}
svg .ytick{text-anchor:end;dominant-baseline:middle}svg .xtick,svg .xlabel,svg .ylabel{text-anchor:middle}
svg .ttft{fill:none;stroke-width:1}svg .req.failed{stroke:#d62728;stroke-width:1.6;fill:none}
svg .sample{fill:none;stroke:#1f77b4;stroke-width:1.2}svg .restart{stroke:#d62728;stroke-width:1}
svg .failed-level{fill:#d62728;fill-opacity:.12}svg .envelope-mark{stroke:#2a7d2a;stroke-dasharray:4 3}
svg .envelope-label{fill:#2a7d2a}
.legend .key{margin-right:1.2em}.swatch{display:inline-block;width:.8em;height:.8em;
margin-right:.3em}.failed-swatch{background:#d62728;opacity:.3}
.panels{display:flex;flex-wrap:wrap;gap:8px}.notes{font-size:.9em}
"""


def evidence_html(record: dict[str, Any]) -> str:
    """RECORD (one promotion gate run) as one self-contained HTML page."""
    gate = str(record.get("gate") or "?")
    status = str(record.get("status") or "?")
    release = record.get("release")
    previous = record.get("previous")
    state = status if status in ("pass", "fail") else ""
    title = f"{gate} gate: {release} {status}"
    meta = [("candidate release", release), ("previous release", previous),
            ("gate", gate), ("status", status), ("envelope", record.get("envelope")),
            ("time", record.get("time")), ("by", record.get("by")),
            ("node", record.get("node")), ("serving group", record.get("group")),
            ("stamp", record.get("stamp"))]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>ascendctl promotion evidence: {text(title)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f'<h1>{text(gate)} gate: {text(release)}'
        + (f" against {text(previous)}" if previous else "")
        + f' — <span class="{state}">{text(status.upper())}</span></h1>',
        f'<p class="summary">{text(record.get("summary") or "")}</p>',
        "<table class=\"meta\">" + "".join(
            f"<tr><th>{text(k)}</th><td>{text(v)}</td></tr>"
            for k, v in meta if v is not None) + "</table>",
    ]
    series = release_series(record)
    if series:
        parts += ["<h2>Latency over time</h2>", latency_chart(record, series),
                  "<h2>End-to-end latency histogram</h2>", histogram_chart(record, series)]
    else:
        parts.append("<p>no per-request figures in this record</p>")
    if gate == "soak" or record.get("samples"):
        parts += ["<h2>Soak</h2>", soak_charts(record.get("samples") or [])]
    if gate == "envelope" or record.get("levels"):
        parts += ["<h2>Load envelope</h2>", envelope_chart(record)]
    if gate == "long_tail" or record.get("failing_answers"):
        parts += ["<h2>Failing answers</h2>", answers_table(record.get("failing_answers"))]
    parts += ["<h2>Verdict</h2>", json_block("verdict", record.get("verdict"), open_=True),
              json_block("bench profile", record.get("profile")), "</body></html>"]
    return "\n".join(parts) + "\n"

