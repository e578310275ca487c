"""The evidence page of a promotion gate record (ascendctl/gates/pictures.py): it parses,
draws one mark per request (or a bounded, deterministic selection), marks failures apart,
escapes everything from the record and references nothing outside itself."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

from ascendctl.gates.pictures import (
    MAX_POINTS, downsample, downsample_series, evidence_html, nice_ticks, percentile,
)

NEW, OLD = "r-0000000000bb", "r-0000000000aa"
HOSTILE = '<script>alert("x")</script>'


def requests(n: int, base: float, failed_every: int = 0, error: str = "timed out") -> list:
    out = []
    for i in range(n):
        if failed_every and i % failed_every == failed_every - 1:
            out.append({"i": i, "start_s": i * 0.5, "ttft_ms": None, "e2e_ms": None,
                        "tpot_ms": None, "output_tokens": 0, "error": error})
        else:
            out.append({"i": i, "start_s": i * 0.5, "ttft_ms": base / 4 + i % 7,
                        "e2e_ms": base + (i * 37) % 101, "tpot_ms": 10.0,
                        "output_tokens": 32, "error": None})
    return out


def long_tail(**extra) -> dict:
    return {"release": NEW, "stamp": "20261129T100000Z-0001", "time": "2026-11-29T10:00:00Z",
            "by": "ci", "node": "node0", "group": "g0", "gate": "long_tail", "status": "fail",
            "summary": "12 of 1000 answers failed", "previous": OLD, "envelope": None,
            "profile": {"concurrency": 16}, "verdict": {"status": "fail"},
            "failing_answers": [], "requests": {NEW: requests(1000, 200.0, failed_every=100),
                                                OLD: requests(1000, 180.0)},
            **extra}


def svgs(page: str) -> list[ET.Element]:
    """Each inline <svg> of PAGE, parsed as XML (it must be well-formed)."""
    return [ET.fromstring(block) for block in re.findall(r"<svg\b.*?</svg>", page, re.S)]


def by_class(root: ET.Element, name: str) -> list[ET.Element]:
    return [e for e in root.iter() if name in (e.get("class") or "").split()]


def series(root: ET.Element) -> dict[str, ET.Element]:
    return {g.get("data-release"): g for g in by_class(root, "series")}


class Strict(HTMLParser):
    """Collects the tags of a page, and every attribute that could load something."""

    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.loads: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.loads += [(k, v or "") for k, v in attrs if k in ("href", "src", "xlink:href")
                       or k.startswith("on")]


def test_the_page_parses_and_draws_one_mark_per_request():
    record = long_tail()
    page = evidence_html(record)
    parser = Strict()
    parser.feed(page)
    assert parser.tags[0] == "html" and "script" not in parser.tags and parser.loads == []
    latency, histogram = svgs(page)
    groups = series(latency)
    assert set(groups) == {NEW, OLD}
    for release, rows in record["requests"].items():
        marks = by_class(groups[release], "req")
        assert len(marks) == len(rows)
        answered = [r for r in rows if not r["error"]]
        assert len(by_class(groups[release], "ttft")) == len(answered)
        # failed requests: crosses (not dots), as many as failed
        failed = by_class(groups[release], "failed")
        assert len(failed) == len(rows) - len(answered)
        assert {e.tag for e in failed} <= {"path"}
        assert {e.tag for e in marks if e not in failed} == {"circle"}
        assert all("timed out" in e.find("title").text for e in failed)
    assert len(by_class(groups[NEW], "failed")) == 10
    # the histogram counts every answered request once, per release
    for release, rows in record["requests"].items():
        counted = sum(int(b.get("data-count")) for b in by_class(series(histogram)[release],
                                                                  "bar"))
        assert counted == sum(1 for r in rows if not r["error"])
    # candidate and previous in different colours
    assert groups[NEW].get("fill") != groups[OLD].get("fill")
    # axes with units and ticks
    labels = [t.text for t in latency.iter("text")]
    assert "latency (ms)" in labels and "request start (s)" in labels
    assert len(by_class(latency, "xtick")) >= 3 and len(by_class(latency, "ytick")) >= 3
    assert "end-to-end latency (ms)" in [t.text for t in histogram.iter("text")]
    # header: gate, releases, status and summary
    assert "long_tail gate: r-0000000000bb against r-0000000000aa" in page
    assert "FAIL" in page and "12 of 1000 answers failed" in page


def test_marks_follow_the_record_figures():
    rows = [{"i": i, "start_s": float(s), "e2e_ms": float(e), "ttft_ms": 1.0, "error": None}
            for i, (s, e) in enumerate([(3, 50), (1, 400), (2, 100), (0, 250)])]
    latency = svgs(evidence_html({"gate": "regression", "release": NEW,
                                  "requests": {NEW: rows}}))[0]
    dots = by_class(latency, "req")
    xs = [float(d.get("cx")) for d in dots]
    ys = [float(d.get("cy")) for d in dots]
    assert xs == sorted(xs)                                  # drawn in start order
    # start 0, 1, 2, 3 → e2e 250, 400, 100, 50: higher latency, higher on the chart
    assert sorted(range(4), key=lambda k: ys[k]) == [1, 0, 2, 3]


def test_hostile_strings_are_escaped_everywhere():
    evil = "r-evil"
    record = long_tail(
        release=evil, previous=HOSTILE, summary=f"summary {HOSTILE} \x1b[31mred\x1b[0m",
        group="\u202egroup", requests={evil: requests(10, 100.0, failed_every=3,
                                                      error=f'"><img src=x onerror=alert(1)>'
                                                            f'{HOSTILE} http://127.0.0.1/v1'),
                                       HOSTILE: requests(5, 90.0)},
        failing_answers=[{"release": evil, "i": 2, "findings": [{"kind": HOSTILE}],
                          "text": f"</pre>{HOSTILE}\ud800 https://evil.example/x.js"},
                         {"release": HOSTILE, "i": 3, "error": HOSTILE, "text": ""}],
        verdict={"note": HOSTILE})
    page = evidence_html(record)
    assert "<script" not in page.lower() and "<img" not in page.lower()
    assert "&lt;script&gt;" in page
    assert "\x1b" not in page and "\\u001b[31mred" in page
    assert "\u202e" not in page and "\\u202egroup" in page
    assert "\ud800" not in page
    page.encode("utf-8")                                   # writable as it is
    parser = Strict()
    parser.feed(page)
    assert "script" not in parser.tags and "img" not in parser.tags and parser.loads == []
    for svg in svgs(page):                                 # still well-formed with them in
        assert svg.tag == "svg"
    assert HOSTILE in series(svgs(page)[0])                # the name shown, as text


def test_nothing_outside_the_page_is_referenced():
    record = long_tail(summary="see http://example.com/x and https://example.org",
                       failing_answers=[{"release": NEW, "i": 1, "error": "x",
                                         "text": "<a href='https://cdn.example/x'>"}])
    page = evidence_html(record)
    assert "http://" not in page and "https://" not in page
    parser = Strict()
    parser.feed(page)
    assert parser.loads == [] and not {"link", "script", "iframe", "img", "a"} & set(parser.tags)
    assert not re.search(r"url\(|@import", page, re.I)
    assert "xmlns" not in page                             # no namespace URL either


def test_large_series_are_downsampled_deterministically_and_bounded():
    big = requests(20_000, 300.0, failed_every=50)
    record = long_tail(requests={NEW: big, OLD: requests(MAX_POINTS + 1, 280.0)})
    page = evidence_html(record)
    assert page == evidence_html(record)                   # the same record, the same page
    groups = series(svgs(page)[0])
    marks = by_class(groups[NEW], "req")
    assert len(marks) == MAX_POINTS
    assert len(by_class(groups[NEW], "failed")) == 400     # every failure kept
    assert len(by_class(groups[OLD], "req")) == MAX_POINTS
    assert "3600 of 19600 answered and 400 of 400 failed drawn" in page
    assert len(page) < 3_000_000
    # the histogram still counts every request
    counted = sum(int(b.get("data-count")) for b in by_class(series(svgs(page)[1])[NEW], "bar"))
    assert counted == 19_600


def test_downsampling_keeps_the_ends_and_the_spikes():
    items = list(range(10_001))
    kept = downsample(items, 100)
    assert len(kept) == 100 and kept[0] == 0 and kept[-1] == 10_000
    assert kept == sorted(set(kept)) and downsample(items, 100) == kept
    assert downsample(items[:50], 100) == items[:50]
    points = [(float(t), 1.0) for t in range(10_000)]
    points[4321] = (4321.0, 999.0)                         # one spike
    thinned = downsample_series(points, 200)
    assert len(thinned) <= 200 and (4321.0, 999.0) in thinned
    assert [t for t, _v in thinned] == sorted(t for t, _v in thinned)


def test_soak_draws_each_series_and_marks_restarts():
    samples = [{"t": 10.0 * i, "engine_restarts": 0 if i < 30 else 1, "recoveries": 0,
                "hbm_used_mib": 30_000 + i, "rss_mib": 8_000 + 2 * i, "requests_running": 4,
                "generation_tokens_total": 1000 * i if i < 30 else 50 * i}
               for i in range(60)]
    page = evidence_html({"gate": "soak", "status": "fail", "release": NEW,
                          "summary": "engine restarted", "samples": samples,
                          "requests": {NEW: requests(50, 100.0)}})
    charts = [s for s in svgs(page) if s.get("class") == "soak"]
    assert len(charts) == 4
    lines = {p.get("data-key"): p for c in charts for p in by_class(c, "sample")}
    assert set(lines) == {"rss_mib", "hbm_used_mib", "generation_tokens_total",
                          "requests_running"}
    assert all(len(p.get("points").split()) == 60 for p in lines.values())
    # the restart at t=300 (counter and the token counter falling): red lines in each chart
    for chart in charts:
        restarts = by_class(chart, "restart")
        assert len(restarts) == 2 and {r.get("x1") for r in restarts} == \
            {restarts[0].get("x1")}
    labels = {t.text for c in charts for t in c.iter("text")}
    assert {"MiB", "tokens", "requests", "time (s)"} <= labels


def test_envelope_draws_percentiles_per_level_and_marks_failed_levels():
    def level(concurrency, held, offset):
        rows = [{"i": i, "start_s": i * 0.1, "ttft_ms": 5.0, "e2e_ms": float(offset + i),
                 "error": None} for i in range(1, 101)]
        return {"concurrency": concurrency, "held": held,
                "reasons": [] if held else [f"p99 TTFT over the SLO {HOSTILE}"],
                "requests": rows}

    record = {"gate": "envelope", "status": "pass", "release": NEW, "envelope": 8,
              "summary": "envelope 8",
              "levels": [level(16, False, 1600), level(1, True, 0), level(8, True, 800),
                         level(32, False, 3200), level(4, True, 400)]}
    page = evidence_html(record)
    chart = next(s for s in svgs(page) if s.get("class") == "envelope")
    assert len(by_class(chart, "failed-level")) == 2
    assert [t.text for t in by_class(chart, "xtick")] == ["1", "4", "8", "16", "32"]
    envelope = by_class(chart, "envelope-mark")
    assert len(envelope) == 1
    assert envelope[0].get("x1") == by_class(chart, "xtick")[2].get("x")   # at level 8
    p99 = next(g for g in by_class(chart, "percentile") if g.get("data-p") == "99")
    assert len(p99.findall("circle")) == 5
    # nearest-rank percentiles of e2e 1..100 (+ the level's offset), from the record
    assert "<td>8</td><td>held</td><td>100</td><td>0</td><td>850</td><td>890</td>" \
        "<td>899</td>" in page
    assert "&lt;script&gt;" in page and "<script" not in page
    assert percentile([float(v) for v in range(1, 101)], 99) == 99.0


def test_a_bare_record_still_renders():
    page = evidence_html({})
    assert page.startswith("<!DOCTYPE html>") and "no per-request figures" in page
    page = evidence_html({"gate": "soak", "samples": [{"t": "x"}, None], "levels": "x",
                          "requests": {NEW: [None, {"start_s": float("nan")}, {"start_s": 1}]}})
    for svg in svgs(page):
        assert svg.tag == "svg"


def test_ticks_are_round_and_cover_the_range():
    assert nice_ticks(0, 1000) == [0, 200, 400, 600, 800, 1000]
    assert nice_ticks(0.3, 1.7) == [0.5, 1.0, 1.5]
    assert nice_ticks(120, 980) == [200, 400, 600, 800]
    assert nice_ticks(5, 5) == [5]
