"""The load envelope (ascendctl/promotion/envelope.py) from sweeps built on the lab's real
`vllm bench serve` result, and the gateway that admits a share of it
(render/admission.py, templates/nginx/ascendctl.conf.j2): checked by the real `nginx -t`
and run by the real nginx against a stand-in head on loopback."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ascendctl.benchmark.figures import BenchFigures, parse_result
from ascendctl.inventory.model import SloSpec
from ascendctl.load import load_inventory
from ascendctl.promotion.envelope import Envelope, SweepPoint, find_envelope
from ascendctl.render.admission import admission
from ascendctl.render.proxy import render_site
from tests.conftest import free_port
from tests.unit.nginx_run import post, running_nginx, wait_until_answering
from tests.unit.test_playbook_rolling import group_inventory
from tests.unit.test_replicas import nginx_t

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "bench" / \
    "vllm_bench_serve_result_lab.txt"
REAL = parse_result(json.loads(FIXTURE.read_text().split("\n", 1)[1]))
ENVELOPE_ON = "slo: {promotion: {envelope: {enabled: true}}}"


def at_load(concurrency: int, *, failed: int = 0) -> BenchFigures:
    """The real run (concurrency 4) as if at CONCURRENCY: p99 latencies grow with the
    queue past 4 slots, throughput with the batch up to 8."""
    queue = max(1.0, concurrency / 4)
    latency = {m: {k: v * (queue if m == "ttft" else queue ** 0.5) for k, v in stats.items()}
               for m, stats in REAL.latency_ms.items()}
    return replace(REAL, latency_ms=latency, max_concurrency=concurrency, failed=failed,
                   output_throughput=REAL.output_throughput * min(concurrency, 8) / 4)


LEVELS = (1, 2, 4, 8, 16, 32, 64)
# the real p99 TTFT is 76.7 ms at 4: 153 at 8, 307 at 16, 613 at 32, 1227 at 64
SLO = SloSpec(max_p99_ttft_ms=700.0, max_p99_tpot_ms=200.0)


def test_the_envelope_is_the_highest_level_where_the_latency_slos_hold():
    envelope = find_envelope([SweepPoint(c, at_load(c)) for c in LEVELS], SLO)
    assert envelope.concurrency == 32 and envelope.bounded
    (failed,) = [v for v in envelope.levels if not v.held]
    assert failed.concurrency == 64
    assert failed.reasons[0].startswith("p99 time to first token: 1226.66 ms (SLO <= 700 ms)")
    assert envelope.summary().startswith("envelope 32; concurrency 64 failed: p99 time")


def test_a_hang_errors_or_no_result_end_the_envelope_below_them():
    base = [SweepPoint(c, at_load(c)) for c in LEVELS]
    hung = [replace(p, hung=True, figures=None) if p.concurrency == 16 else p for p in base]
    assert find_envelope(hung, SLO).concurrency == 8
    assert find_envelope(hung, SLO).levels[4].reasons == ("the run hung", "no result")
    errors = [replace(p, figures=at_load(8, failed=3)) if p.concurrency == 8 else p
              for p in base]
    assert find_envelope(errors, SLO).concurrency == 4
    resets = [replace(p, errors=2) if p.concurrency == 4 else p for p in base]
    assert find_envelope(resets, SLO).levels[2].reasons == ("2 request error(s)",)


def test_a_level_that_holds_above_a_failure_is_an_anomaly_not_the_envelope():
    sweep = [SweepPoint(c, at_load(c)) for c in LEVELS[:6]]
    sweep[4] = replace(sweep[4], hung=True)                      # 16 hung, 32 held
    envelope = find_envelope(sweep, SLO)
    assert envelope.concurrency == 8 and envelope.anomalies == (32,)


def test_throughput_per_npu_does_not_bound_the_envelope():
    """At concurrency 1 the throughput SLO fails; the envelope is about latency."""
    slo = SloSpec(max_p99_ttft_ms=700.0, max_p99_tpot_ms=200.0,
                  min_output_tokens_per_s_per_npu=REAL.output_throughput * 0.9)
    assert find_envelope([SweepPoint(c, at_load(c)) for c in LEVELS], slo).concurrency == 32


def test_no_failure_is_an_unbounded_envelope_and_a_failing_first_level_none():
    loose = SloSpec(max_p99_ttft_ms=10_000.0)
    envelope = find_envelope([SweepPoint(c, at_load(c)) for c in LEVELS], loose)
    assert envelope.concurrency == 64 and not envelope.bounded
    assert "no level tested failed" in envelope.summary()
    tight = SloSpec(max_p99_ttft_ms=10.0)
    nothing = find_envelope([SweepPoint(c, at_load(c)) for c in LEVELS], tight)
    assert nothing.concurrency is None
    assert nothing.summary().startswith("no envelope: concurrency 1 already failed")


def test_sweep_order_does_not_matter_and_bad_sweeps_are_errors():
    points = [SweepPoint(c, at_load(c)) for c in LEVELS]
    assert find_envelope(points[::-1], SLO) == find_envelope(points, SLO)
    with pytest.raises(ValueError, match="distinct"):
        find_envelope(points + points[:1], SLO)
    with pytest.raises(ValueError, match="empty"):
        find_envelope([], SLO)


def test_the_envelope_is_stored_and_read_back():
    envelope = find_envelope([SweepPoint(c, at_load(c)) for c in LEVELS], SLO)
    stored = json.loads(json.dumps(envelope.as_dict()))
    assert stored["anomalies"] == [] and stored["summary"] == envelope.summary()
    assert Envelope.from_dict(stored) == envelope


# -- the gateway -----------------------------------------------------------------------

def test_admission_is_a_share_of_the_envelope_per_group_in_the_balancer(tmp_path):
    inv = group_inventory(tmp_path, groups=3, per_group=1, extra_vars=ENVELOPE_ON)
    assert admission(inv, 32, 3).limit == 86          # floor(0.9 × 32 × 3)
    assert admission(inv, 32, 2).limit == 57          # a group out while it switches
    assert admission(inv, 1, 1).limit == 1            # never 0
    assert admission(inv, None, 3) is None            # no envelope known yet
    assert admission(inv, 32, 3).status == 503 and admission(inv, 32, 3).retry_after_s == 2
    off = group_inventory(tmp_path, groups=3, per_group=1)
    assert admission(off, 32, 3) is None


def test_without_the_envelope_the_site_is_rendered_exactly_as_before(tmp_path):
    plain = render_site(group_inventory(tmp_path, groups=2, per_group=1))
    disabled = group_inventory(tmp_path, groups=2, per_group=1,
                               extra_vars="slo: {promotion: {envelope: {enabled: false}}}")
    assert render_site(disabled, envelope=32) == plain
    enabled = group_inventory(tmp_path, groups=2, per_group=1, extra_vars=ENVELOPE_ON)
    assert render_site(enabled) == plain            # enabled, but no envelope known
    assert b"limit_conn" not in plain


def test_the_admitting_site_passes_nginx_t(tmp_path):
    text = group_inventory(tmp_path, groups=2, per_group=1, extra_vars=(
        "slo: {promotion: {envelope: {enabled: true, admit_fraction: 0.75, "
        "reject_status: 429, retry_after_s: 5}}}"))
    site = render_site(text, drained={"g1"}, envelope=20).decode()
    assert "limit_conn ascendctl_t_admit 15;" in site    # 0.75 × 20 × 1 group in service
    assert "limit_conn_status 429;" in site and "error_page 429 = @ascendctl_t_busy;" in site
    assert "add_header Retry-After 5 always;" in site
    assert "limit_conn_zone $ascendctl_t_admit zone=ascendctl_t_admit:1m;" in site
    assert " queue " not in site        # nginx's upstream queue (a commercial build) waits
    nginx_t(tmp_path / "nginx", site)


class Head(BaseHTTPRequestHandler):
    """A head whose completions take until `release` is set; its model list is instant."""

    release = threading.Event()
    started = threading.Semaphore(0)

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.answer(200, {"data": [{"id": "tiny"}]})

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        Head.started.release()
        Head.release.wait(30)
        self.answer(200, {"choices": [{"text": " ok"}]})

    def answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_nginx_admits_up_to_the_limit_and_answers_past_it_at_once(tmp_path):
    """The rendered site run by the real nginx in front of a head whose completions hang:
    the first 2 (0.9 × envelope 3) wait for the head, the third is answered 503 with
    Retry-After at once, a model list still passes, and a slot frees when one finishes."""
    head_port, listen = free_port(), free_port()
    server = ThreadingHTTPServer(("127.0.0.1", head_port), Head)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Head.release.clear()
    path = tmp_path / "inv.yaml"
    group_inventory(tmp_path, groups=1, per_group=1, extra_vars=ENVELOPE_ON)
    path.write_text(path.read_text().replace(
        "proxy: {enabled: true}", f"port: {head_port}, proxy: {{enabled: true, port: {listen}}}"))
    site = render_site(load_inventory(path), envelope=3).decode()
    assert "limit_conn ascendctl_t_admit 2;" in site
    url = f"http://127.0.0.1:{listen}/v1/completions"
    held: list[tuple[int, dict, dict]] = []
    threads = [threading.Thread(target=lambda: held.append(post(url))) for _ in range(2)]
    with running_nginx(tmp_path / "nginx", site) as nginx:
        try:
            wait_until_answering(nginx, listen)
            for thread in threads:
                thread.start()
            for _ in threads:
                assert Head.started.acquire(timeout=20)  # both reached the head and wait
            started = time.monotonic()
            status, headers, body = post(url, timeout=10)
            assert time.monotonic() - started < 2.0
            assert status == 503 and headers["Retry-After"] == "2"
            assert body["error"]["type"] == "overloaded" and body["error"]["code"] == 503
            with urllib.request.urlopen(f"http://127.0.0.1:{listen}/v1/models", timeout=5) as r:
                assert r.status == 200
            Head.release.set()
            for thread in threads:
                thread.join(timeout=30)
            assert [h[0] for h in held] == [200, 200]
            assert post(url)[0] == 200                   # a slot is free again
        finally:
            Head.release.set()
            server.shutdown()
            server.server_close()
