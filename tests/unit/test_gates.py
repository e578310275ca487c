"""The promotion gates' own logic, without a node: the profile cut to the deployment, the
evidence's timeline, a soak's samples as the node sends them, a long tail's answers
judged, stored figures only reused for the same profile, and `slo.promotion`'s new fields.
What the gates measure is tested against the real engine in tests/lab/test_replicas_lab.py
(section P)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError
from ascendctl.gates import long_tail, regression, soak
from ascendctl.gates.context import MAX_REQUEST_RECORDS, GateResult, timeline
from ascendctl.gates.head import LoadRun
from ascendctl.gates.profile import Profile, resolve_profile
from ascendctl.gates.runner import PromotionRun, StoredResult
from ascendctl.inventory.prompts import Expectation, PromptSet, QualityPrompt
from ascendctl.inventory.promotion import PromotionSpec
from ascendctl.promotion.regression import RoundFigures
from tests.unit.test_playbook_rolling import group_inventory


def test_the_profile_is_cut_to_what_the_engine_accepts(tmp_path):
    inv = group_inventory(tmp_path, groups=1, per_group=1, extra_vars=(
        "slo: {promotion: {profile: {input_len: 100000, output_len: 100000, concurrency: 4, "
        "prompts_per_round: 2}}}"))
    spec = inv.slo.promotion
    assert spec is not None
    profile = resolve_profile(inv, spec)
    limit = inv.serving.max_model_len
    assert profile.output_len == limit // 2
    assert profile.input_len + profile.output_len < limit
    # never fewer requests than slots: a round must fill its concurrency
    assert (profile.concurrency, profile.num_prompts) == (4, 4)


def test_a_profile_digest_names_every_field():
    base = Profile(input_len=64, output_len=16, concurrency=4, num_prompts=16, seed=0)
    assert base.digest == Profile.from_dict(base.as_dict()).digest
    changed = {base.at(5, 16).digest, base.at(4, 17).digest,
               Profile(65, 16, 4, 16, 0).digest, Profile(64, 17, 4, 16, 0).digest,
               Profile(64, 16, 4, 16, 1).digest}
    assert base.digest not in changed and len(changed) == 5


def run_of(release: str, started: float, rows: list[dict]) -> LoadRun:
    return LoadRun(release=release, node="n0", figures=None, requests=rows, hung=False,
                   wall_s=1.0, started=started)


def test_the_timeline_puts_every_run_on_one_clock_and_stays_bounded():
    rows = [{"i": 0, "start_s": 0.5, "e2e_ms": 10.0, "secret": "x"}]
    out = timeline([run_of("a", 100.0, rows), run_of("b", 103.0, rows)], t0=100.0)
    assert out["a"][0]["start_s"] == 0.5 and out["b"][0]["start_s"] == 3.5
    assert "secret" not in out["a"][0]
    many = [{"i": i, "start_s": i / 10, "e2e_ms": 1.0} for i in range(3 * MAX_REQUEST_RECORDS)]
    thinned = timeline([run_of("a", 0.0, many)], t0=0.0)["a"]
    assert len(thinned) == MAX_REQUEST_RECORDS
    assert thinned[0]["i"] == 0 and thinned[1]["i"] == 3 and thinned[-1]["i"] < len(many)


def test_soak_samples_as_the_node_sends_them():
    rows = [{"t": 20.0, "engine_restarts": 0, "recoveries": 0, "hbm_used_mib": None,
             "rss_mib": 100.0, "requests_running": 2, "generation_tokens_total": 50},
            {"t": 10.0, "engine_restarts": 0, "recoveries": 0, "hbm_used_mib": 5.0,
             "rss_mib": 90.0, "requests_running": 2, "generation_tokens_total": 10},
            {"t": 10.0, "engine_restarts": 9},             # a duplicate time: dropped
            {"engine_restarts": 3}]                         # no time: dropped
    samples = soak.to_samples(rows)
    assert [s.t_s for s in samples] == [10.0, 20.0]
    assert samples[1].hbm_used_mib == 0.0 and samples[0].engine_restarts == 0
    assert samples[1].generation_tokens_total == 50.0


def prompts() -> PromptSet:
    return PromptSet("test", (
        QualityPrompt(id="capital", prompt="The capital of France is",
                      expect=Expectation("contains", "Paris"), max_tokens=8),
        QualityPrompt(id="free", prompt="Tell me something", max_tokens=8)))


def test_a_long_tail_fails_errors_garbage_and_missed_expectations_only():
    rows = [
        {"i": 0, "text": " Paris, of course.", "error": None},          # ok
        {"i": 1, "text": " a fine day for a walk", "error": None},       # ok
        {"i": 2, "text": " Lyon", "error": None},                        # expectation missed
        {"i": 3, "text": "\ufffd\ufffd garbage " * 20, "error": None},   # garbage
        {"i": 4, "text": None, "error": "HTTP 500"},                     # request failed
        {"i": 5, "text": " it rains", "error": None},                    # ok
    ]
    counts, failing = long_tail.judge_answers(run_of("r", 0.0, rows), prompts())
    assert (counts.requests, counts.failed) == (6, 3)
    assert [f["i"] for f in failing] == [2, 3, 4]
    assert failing[0]["why"].startswith("expected contains") and failing[0]["prompt"] == "capital"
    assert "unprintable" in failing[1]["why"] or "repeated" in failing[1]["why"]
    assert failing[2]["why"] == "HTTP 500"


def test_stored_figures_are_reused_only_for_the_same_profile():
    profile = Profile(64, 16, 4, 16, 0)
    row = {"output_throughput": 200.0, "p99_ttft_ms": 50.0, "p99_tpot_ms": 10.0}
    record = {"profile_digest": profile.digest,
              "rounds_figures": {"candidate": [row, row]}}
    assert regression._stored_rounds(record, profile) == [RoundFigures(200.0, 50.0, 10.0)] * 2
    assert regression._stored_rounds(record, profile.at(8, 16)) is None
    assert regression._stored_rounds({**record, "rounds_figures": {"candidate": [{}]}},
                                     profile) is None
    assert regression._stored_rounds(None, profile) is None


def test_a_promotion_run_names_the_failed_gate_and_its_evidence():
    ran = PromotionRun("rel-b", "node0", "replica0")
    ran.results.append(StoredResult(GateResult("envelope", True, "envelope 4", {}, 4),
                                    "/r/e.json", "/r/e.html"))
    ran.results.append(StoredResult(GateResult("soak", False, "FAIL: RSS +900 MiB/h", {}),
                                    "/r/s.json", "/r/s.html"))
    assert not ran.passed and ran.envelope == 4
    assert ran.summary() == ("promotion gate soak failed: FAIL: RSS +900 MiB/h "
                             "(evidence: /r/s.html)")
    assert [g["gate"] for g in ran.as_dict()["gates"]] == ["envelope", "soak"]


def test_the_new_promotion_fields_are_checked():
    spec = PromotionSpec(gates=["soak", "regression"])
    assert spec.ordered_gates == ("regression", "soak")
    assert PromotionSpec().soak_s == 7200
    with pytest.raises(ValidationError, match="each gate at most once"):
        PromotionSpec(gates=["soak", "soak"])
    with pytest.raises(ValidationError, match="rise strictly"):
        PromotionSpec(envelope={"levels": [1, 4, 2]})
    with pytest.raises(ValidationError, match="at most half of stall_s"):
        PromotionSpec(soak_s=600, stall_s=20, soak_sample_s=15)
    with pytest.raises(ValidationError):
        PromotionSpec(gates=["canary"])


def test_bench_runs_one_promotion_gate_at_a_time(tmp_path):
    inv = tmp_path / "inv.yaml"
    inv.write_text("all: {}\n")
    result = subprocess.run([sys.executable, "-m", "ascendctl", "bench", "-i", str(inv),
                             "--envelope", "--long-tail", "1000"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "each run alone" in result.stderr


class TimedHead:
    """A head whose rounds take a moment and are timed: the regression gate's view of
    one, without a node (its real loads are the lab's section P)."""

    def __init__(self, name: str, release: str, throughput: float, pair):
        import threading

        self.pair = pair        # a Barrier the partner's round must reach too
        self.name = self.node = name
        self.release, self.throughput = release, throughput
        self.rounds: list[tuple[float, float]] = []
        self.lock = threading.Lock()

    def load(self, profile: Profile, limit_s: float) -> LoadRun:
        import time

        from ascendctl.benchmark.figures import parse_result

        # run back to back, a round would wait here for a partner that is not running
        self.pair.wait(timeout=10)
        started = time.monotonic()
        time.sleep(0.05)
        with self.lock:
            self.rounds.append((started, time.monotonic()))
        figures = parse_result({"completed": 16, "duration": 1.0, "num_prompts": 16,
                                "output_throughput": self.throughput,
                                "p99_ttft_ms": 50.0, "p99_tpot_ms": 10.0})
        return LoadRun(self.release, self.node, figures, [], False, 0.05, time.time())

    def stored_record(self, release: str, gate: str) -> None:
        return None


def test_side_by_side_rounds_run_on_both_heads_at_the_same_moment(tmp_path):
    """CI refused an unchanged release at 0.55 of itself when the two heads ran their
    rounds back to back on the lab's shared cores (the live head's traffic competed with
    the canary's round). Each pair now runs at once: every candidate round overlaps its
    previous-release partner, and the pairs follow one another."""
    import threading

    from ascendctl.gates.context import GateContext

    inv = group_inventory(tmp_path)
    spec = PromotionSpec(rounds=9, confidence=0.99)
    pair = threading.Barrier(2)
    candidate = TimedHead("node0", "r-new", 198.0, pair)
    live = TimedHead("node1", "r-old", 200.0, pair)
    said: list[str] = []
    result = regression.run(GateContext(inv=inv, spec=spec, group="replica0",
                                        candidate=candidate, previous="r-old",
                                        live=live, say=said.append))   # type: ignore[arg-type]
    assert len(candidate.rounds) == len(live.rounds) == 10        # a warm-up, then 9 pairs
    for (c0, c1), (p0, p1) in zip(candidate.rounds, live.rounds):
        assert c0 < p1 and p0 < c1, "the two rounds of a pair overlap"
    starts = [c0 for c0, _ in candidate.rounds]
    ends = [max(c1, p1) for (_, c1), (_, p1) in zip(candidate.rounds, live.rounds)]
    assert all(end <= start for end, start in zip(ends, starts[1:])), "pairs in turn"
    figures = result.record["rounds_figures"]
    assert [r["output_throughput"] for r in figures["candidate"]] == [198.0] * 9
    assert [r["output_throughput"] for r in figures["previous"]] == [200.0] * 9
    assert result.passed and result.record["mode"].startswith("side by side with node1")
    assert "regression: round 9/9 done" in said
