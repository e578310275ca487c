"""`ascendctl bench`: run vLLM's benchmark on the head node, judge it, store it there.

The jump host has no vLLM; the head has the engine's venv, the tokenizer (the release's
model directory) and the API key (the release's 0600 secrets.env). So the benchmark runs
on the head against 127.0.0.1, in three calls over one SSH connection: locate the
serving release, run `vllm bench serve`, store the verdict with the release.
"""

from __future__ import annotations

import getpass
import secrets as token_source
import socket
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ascendctl.benchmark.figures import BenchFigures, parse_result
from ascendctl.benchmark.settings import (
    BenchSettings, bench_argv, bench_executable, npus_serving, validate,
)
from ascendctl.benchmark.slo import Verdict, evaluate
from ascendctl.errors import AscendctlError
from ascendctl.exitcodes import Exit
from ascendctl.transport.nodecall import NodeCallError, call_node
from ascendctl.inventory import Inventory

QUICK_TIMEOUT_S = 60.0


@dataclass
class BenchReport:
    cluster: str
    node: str
    release: str
    stamp: str
    settings: BenchSettings
    figures: BenchFigures
    verdict: Verdict
    seconds: float
    stored: Optional[str]
    result_path: Optional[str]

    @property
    def exit_code(self) -> Exit:
        return Exit.OK if self.verdict.passed else Exit.FAILED

    def as_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster, "node": self.node, "release": self.release,
            "stamp": self.stamp, "settings": self.settings.as_dict(),
            "figures": self.figures.as_dict(), "verdict": self.verdict.as_dict(),
            "seconds": self.seconds, "stored": self.stored, "vllm_result": self.result_path,
        }


def make_stamp(now: float | None = None) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now)) + "-" + token_source.token_hex(2)


class HeadNode:
    """runtime bench_node.py operations on the head, over one connection."""

    def __init__(self, inv: Inventory, conn: Any):
        self.inv, self.conn = inv, conn

    def call(self, op: str, timeout: float = QUICK_TIMEOUT_S, **kwargs: Any) -> dict[str, Any]:
        return call_node(self.conn, node=self.inv.head.name, python=self.inv.deploy.python,
                         entry="bench_node", timeout=timeout,
                         request={"op": op, "kwargs": {"root": self.inv.deploy.root, **kwargs}})


def run_bench(inv: Inventory, settings: BenchSettings, conn: Any,
              say: Callable[[str], None] = lambda _msg: None) -> BenchReport:
    validate(settings, inv)
    head = HeadNode(inv, conn)
    executable = bench_executable(inv)
    try:
        where = head.call("locate", bench=executable)
    except NodeCallError as err:
        raise AscendctlError(str(err)) from None
    if not where.get("release"):
        raise AscendctlError(f"{inv.head.name}: nothing is deployed ({inv.deploy.root}/current "
                             "does not exist); run `ascendctl deploy` first")
    if not where["bench_ok"]:
        raise AscendctlError(f"{inv.head.name}: {executable} is not an executable; `vllm bench "
                             "serve` runs from the engine's environment (serving.engine)")
    if not where["model_ok"]:
        raise AscendctlError(f"{inv.head.name}: {where['model_dir']} has no config.json; the "
                             "tokenizer is read from the release's model directory")
    release = where["release"]
    argv = bench_argv(inv, settings, executable=where["bench_path"],
                      release_dir=where["release_dir"])
    stamp = make_stamp()
    say(f"{inv.head.name}: vllm bench serve against {release} ({settings.prompts} prompts, "
        f"{settings.input_len} in / {settings.output_len} out, concurrency "
        f"{settings.concurrency})")
    ran = head.call("run", timeout=settings.timeout_s + QUICK_TIMEOUT_S, release=release,
                    argv=argv, stamp=stamp, limit_s=settings.timeout_s)
    if ran["exit"] != 0 or ran["result"] is None:
        tail = _last_lines(ran.get("output_tail") or "", 12)
        status = "timed out" if ran["exit"] is None else f"exited {ran['exit']}"
        raise AscendctlError(f"{inv.head.name}: vllm bench serve {status}:\n{tail}")
    figures = parse_result(ran["result"])
    verdict = evaluate(figures, inv.slo, npus_serving(inv))
    report = BenchReport(cluster=inv.cluster.name, node=inv.head.name, release=release,
                         stamp=stamp, settings=settings, figures=figures, verdict=verdict,
                         seconds=ran["seconds"], stored=None, result_path=ran["result_path"])
    by = f"{getpass.getuser()}@{socket.gethostname()}"
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    record = {**report.as_dict(), "time": when, "by": by}
    event = {"event": "bench", "release": release, "time": when, "by": by,
             "verdict": verdict.status, "stamp": stamp,
             "figures": headline(figures, verdict), "settings": settings.as_dict()}
    stored = head.call("store", release=release, stamp=stamp, record=record, event=event)
    report.stored = stored["path"]
    return report


def headline(figures: BenchFigures, verdict: Verdict) -> dict[str, Any]:
    """The few figures the history event of a bench run keeps (rounded)."""
    return {key: round(value, 3) if isinstance(value, float) else value
            for key, value in headline_figures(figures.as_dict(), verdict.as_dict()).items()}


def headline_figures(figures: dict[str, Any], verdict: dict[str, Any]) -> dict[str, Any]:
    """The headline from the JSON forms of BenchFigures and Verdict (as stored)."""
    latency = figures.get("latency_ms") or {}
    return {
        "output_tok_s": figures.get("output_throughput"),
        "output_tok_s_per_npu": verdict.get("output_tokens_per_s_per_npu"),
        "p99_ttft_ms": (latency.get("ttft") or {}).get("p99"),
        "p99_tpot_ms": (latency.get("tpot") or {}).get("p99"),
        "completed": figures.get("completed"), "failed": figures.get("failed"),
    }


def _last_lines(text: str, count: int) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join("  " + line for line in lines[-count:])


def stored_results(inv: Inventory, conn: Any) -> dict[str, list[dict[str, Any]]]:
    """The bench records kept on the head, by release (oldest first)."""
    return HeadNode(inv, conn).call("list")["records"]


def headline_from_record(record: dict[str, Any]) -> dict[str, Any]:
    """What `history` shows of a stored record (read back from the head)."""
    verdict = record.get("verdict") or {}
    return {
        "time": record.get("time"),
        "stamp": record.get("stamp"),
        "verdict": verdict.get("status"),
        "summary": verdict.get("summary"),
        "settings": record.get("settings"),
        "figures": headline_figures(record.get("figures") or {}, verdict),
    }
