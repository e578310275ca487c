"""The node's fault monitor end to end: the driver tools answer with the recorded outputs of
tests/fixtures (counters and values substituted in the real lines), the logs are real
files, the engine's metrics a real HTTP server; each fault kind yields its event with the
line that showed it, once, and a second monitor on the same root does not fire again."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ascendctl_runtime.contract import FaultsConfig
from ascendctl_runtime.faults.monitor import FaultMonitor
from ascendctl_runtime.faults.policy import load_policy, table_to_dict
from ascendctl_runtime.npu import HCCN_TOOL
from tests.unit.faults_fixtures import body, section, sections

MAIN = body("npu-smi_info_910B3_8npu_idle.txt").split("CANN:")[0]
HEALTH_ALARM = sections("npu-smi_info_t_health.txt", ("/usr/local/bin/npu-smi",))[1][1]
ECC_910B = section("npu-smi_info_t_ecc.txt", ("===",), "910B constructed")
LINK_UP = next(l for l in body("hccn_tool_a2_checks_mindie_doc.txt").splitlines() if l.startswith("link status:"))
LINK_STAT_0 = section("hccn_tool_link_stat.txt", ("/usr/local/Ascend/driver/tools/hccn_tool", "# ---"), "-i 0 ")
EI0013_LINE = section("fault_log_lines.txt", ("===",), "#7384")
EJ0002_LINE = section("fault_log_lines.txt", ("===",), "EJ0002")
PROCESS_ROW = "| 0       0                 | 842           | /usr/local/pyth          | 59017                   |"
NPUS = list(range(8))


def ecc_text(single: int, multi: int) -> str:
    text = re.sub(r"(HBM Single Bit Error Count\s+: )\d+", rf"\g<1>{single}", ECC_910B)
    return re.sub(r"(HBM Double Bit Error Count\s+: )\d+", rf"\g<1>{multi}", text)


class Node:
    """The tools of a node with eight NPUs and eight ports, answering with real outputs."""

    def __init__(self) -> None:
        self.ecc = {n: (7, 1) for n in NPUS}
        self.up_count = {n: 2 for n in NPUS}
        self.temp = {}                  # npu -> degrees in the main table
        self.alarm = set()              # NPUs in Alarm
        self.processes = []             # process rows of the main table
        self.failing = {}               # command text -> (code, output)
        self.calls = []

    def main_table(self) -> str:
        lines = MAIN.splitlines()
        for n, celsius in self.temp.items():
            i = next(i for i, l in enumerate(lines) if l.startswith(f"| {n}     910B3"))
            lines[i] = re.sub(r"(\| [\d.]+ +)\d+( )", rf"\g<1>{celsius}\g<2>", lines[i], count=1)
        for n in self.alarm:
            i = next(i for i, l in enumerate(lines) if l.startswith(f"| {n}     910B3"))
            lines[i] = lines[i].replace("| OK            |", "| Alarm         |")
        if self.processes:
            i = next(i for i, l in enumerate(lines) if "No running processes found in NPU 0" in l)
            lines[i:i + 1] = self.processes
        return "\n".join(lines) + "\n"

    def __call__(self, argv, timeout):
        name = " ".join(argv)
        self.calls.append(name)
        if name in self.failing:
            return self.failing[name]
        if argv == ["npu-smi", "info"]:
            return 0, self.main_table()
        if argv[:3] == ["npu-smi", "info", "-t"]:
            kind, npu = argv[3], int(argv[5])
            if kind == "ecc":
                return 0, ecc_text(*self.ecc[npu])
            if kind == "health":
                return 0, HEALTH_ALARM
        if argv[0] == HCCN_TOOL:
            port = int(argv[2])
            if argv[3] == "-link":
                return 0, LINK_UP + "\n"
            text = LINK_STAT_0.replace("[devid 0]", f"[devid {port}]")
            return 0, text.replace("link up count       : 2", f"link up count       : {self.up_count[port]}")
        return 127, f"{argv[0]}: not found"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def config(tmp_path, groups=2, url=None, **changes) -> FaultsConfig:
    return FaultsConfig(cluster="c", node="node0", root=str(tmp_path / "root"), npus=NPUS, ports=NPUS,
                        policy=table_to_dict(load_policy()), serving_groups=groups,
                        log_globs=[str(tmp_path / "plog" / "*.log")], engine_metrics_url=url, **changes)


def monitor(tmp_path, node=None, clock=None, **kwargs):
    return FaultMonitor(config(tmp_path, **kwargs), run=node or Node(), clock=clock or Clock(),
                        own_pids=lambda: [842])


def steps(mon, clock, times, before=None):
    """The events of a reading at each time, as (action, key, subject)."""
    out = []
    for t in times:
        clock.now = 1_000_000.0 + t
        if before:
            before(t)
        out.append([(e.action, e.key, e.subject) for e in mon.step()])
    return out


def test_a_multi_bit_ecc_increment_drains_once_with_the_ecc_line_as_evidence(tmp_path):
    node, clock = Node(), Clock()
    mon = monitor(tmp_path, node, clock)
    assert mon.step() == []                          # the baseline
    node.ecc[2] = (7, 2)
    clock.now += 10
    (event,) = mon.step()
    assert (event.action, event.policy_action, event.key, event.subject) == ("drain", "drain", "ecc.multi_bit", "npu2")
    assert event.evidence == "\tHBM Double Bit Error Count               : 2"
    assert event.rule.startswith("policy_defaults.json:") and event.source and event.degraded_from is None
    assert "1 -> 2" in event.detail
    clock.now += 10
    assert mon.step() == []
    saved = json.loads((tmp_path / "root" / "health" / "fault-events.json").read_text())
    assert saved["events"] == [event.to_dict()]
    assert mon.view()["events"] == [event.to_dict()]


def test_single_bit_increments_and_a_one_reading_temperature_spike_do_nothing(tmp_path):
    node, clock = Node(), Clock()
    mon = monitor(tmp_path, node, clock)

    def noise(t):
        node.ecc[t % 8] = (node.ecc[t % 8][0] + 1, 1)
        node.temp = {3: 108} if t == 50 else {}
    assert steps(mon, clock, range(0, 300, 10), noise) == [[]] * 30
    assert mon.errors == []


def test_a_temperature_held_three_readings_alerts_with_the_table_row(tmp_path):
    node, clock = Node(), Clock()
    node.temp = {5: 97}
    mon = monitor(tmp_path, node, clock)
    assert steps(mon, clock, (0, 10, 20)) == [[], [], [("alert", "temp.high", "npu5")]]
    assert mon.events[-1]["evidence"].startswith("| 5     910B3               | OK            | 97.4        97 ")


def test_a_link_counter_climbing_three_times_in_600_s_drains(tmp_path):
    node, clock = Node(), Clock()
    mon = monitor(tmp_path, node, clock)
    mon.step()

    def flap(t):
        node.up_count[6] += 1
    assert steps(mon, clock, (100, 300, 500), flap) == [[], [], [("drain", "link.flap", "port6")]]
    assert mon.events[-1]["evidence"] == "[devid 6]link up count       : 5"


def test_an_alarm_in_the_table_reads_the_codes_with_health(tmp_path):
    node, clock = Node(), Clock()
    node.alarm = {3}
    mon = monitor(tmp_path, node, clock)
    assert mon.step()[0].key == "8C03A000"
    assert "npu-smi info -t health -i 3 -c 0" in node.calls
    assert "npu-smi info -t health -i 2 -c 0" not in node.calls          # OK in the table
    assert mon.events[0]["evidence"] == ("\tHealth Status                  : Alarm\n"
                                         "\tError Code                     : A4025021 8C03A000 8C084E00")


def test_a_foreign_hbm_holder_alerts_with_its_process_row(tmp_path):
    node, clock = Node(), Clock()
    node.processes = [PROCESS_ROW, "| %-7d %-18d| %-13d | %-24s | %-24d |" % (0, 0, 4242, "python3", 3100)]
    mon = monitor(tmp_path, node, clock)
    assert steps(mon, clock, (0, 10)) == [[], [("alert", "hbm.foreign", "npu0")]]
    assert "4242" in mon.events[-1]["evidence"] and "842 " not in mon.events[-1]["evidence"]


def test_a_log_code_restarts_and_lines_older_than_the_first_reading_do_nothing(tmp_path):
    plog = tmp_path / "plog"
    plog.mkdir()
    old = plog / "plog-335_20260313065500.log"
    old.write_text("[INFO] start\n" + EI0013_LINE)          # history before the monitor
    node, clock = Node(), Clock()
    mon = monitor(tmp_path, node, clock)
    assert mon.step() == []
    with old.open("a") as handle:
        handle.write("[INFO] next\n" + EI0013_LINE)
    clock.now += 10
    (event,) = mon.step()
    assert (event.action, event.key, event.subject) == ("restart", "EI0013", "node")
    assert event.evidence == f"{old}: {EI0013_LINE.strip()}"[:500]
    # a new process's plog, created after the first reading, is read from its start
    (plog / "plog-999_20260313070000.log").write_text(EJ0002_LINE)
    clock.now += 10
    assert [(e.action, e.key) for e in mon.step()] == [("restart", "EJ0002")]


def test_a_rotated_or_truncated_log_starts_again_at_0(tmp_path):
    plog = tmp_path / "plog"
    plog.mkdir()
    log = plog / "run.log"
    log.write_text("old\n" * 100)
    node, clock = Node(), Clock()
    mon = monitor(tmp_path, node, clock)
    mon.step()
    log.write_text(EJ0002_LINE)                             # truncated, then written
    clock.now += 10
    assert [e.key for e in mon.step()] == ["EJ0002"]
    log.rename(plog / "run.log.1")
    log.write_text("x\n" * 3 + EI0013_LINE)                # rotated: a new inode
    clock.now += 10
    assert [e.key for e in mon.step()] == ["EI0013"]


def test_one_serving_group_degrades_drain_to_alert_and_says_so(tmp_path):
    node, clock = Node(), Clock()
    mon = monitor(tmp_path, node, clock, groups=1)
    mon.step()
    node.ecc[4] = (7, 2)
    clock.now += 10
    (event,) = mon.step()
    assert (event.action, event.policy_action, event.degraded_from) == ("alert", "drain", "drain")
    assert event.note == "only one serving group: cannot drain"
    assert mon.view()["limits"] == "only one serving group: drain and isolate act as alert"


def test_a_failing_command_or_unparsable_output_is_a_gather_error_not_an_exception(tmp_path):
    node, clock = Node(), Clock()
    node.failing = {"npu-smi info -t ecc -i 1 -c 0": (0, "dcmi module initialize failed. ret is -8005\n"),
                    f"{HCCN_TOOL} -i 2 -link -g": (255, "hccn_tool: device busy\n"),
                    f"{HCCN_TOOL} -i 3 -link_stat -g": (0, "[devid 3]garbage : 1\n")}
    mon = monitor(tmp_path, node, clock)
    assert mon.step() == []
    errors = mon.view()["gather_errors"]
    assert len(errors) == 3
    assert errors[0].startswith("npu-smi info -t ecc -i 1 -c 0: npu-smi info -t ecc: npu-smi failed: dcmi")
    assert errors[1] == f"{HCCN_TOOL} -i 2 -link -g: exit 255: hccn_tool: device busy"
    node.failing = {"npu-smi info": (0, "")}                 # no table at all
    clock.now += 10
    assert mon.step() == [] and mon.view()["gather_errors"][0].startswith("npu-smi info: ")


def test_a_second_monitor_on_the_same_root_does_not_fire_again(tmp_path):
    plog = tmp_path / "plog"
    plog.mkdir()
    log = plog / "plog-1.log"
    log.write_text("")
    node, clock = Node(), Clock()
    first = monitor(tmp_path, node, clock)
    first.step()
    log.write_text(EI0013_LINE)
    node.ecc[0] = (7, 2)
    node.alarm = {5}
    clock.now += 10
    assert sorted((e.key, e.subject) for e in first.step()) == [
        ("8C03A000", "npu5"), ("8C084E00", "npu5"), ("EI0013", "node"), ("ecc.multi_bit", "npu0")]
    second = monitor(tmp_path, node, clock)          # the agent restarted
    clock.now += 10
    assert second.step() == []                       # same log lines, same counter, same episode
    assert len(second.view()["events"]) == 4
    node.ecc[0] = (7, 3)                             # a new jump escalates, in the same episode
    clock.now += 10
    assert [(e.action, e.key) for e in second.step()] == [("isolate", "ecc.multi_bit"),
                                                           ("alert", "health.alarm")]   # its third reading


def test_a_state_file_that_is_no_state_starts_afresh(tmp_path):
    path = tmp_path / "root" / "health" / "faults-state.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"format": 1, "ecc": {"0": {"single_bit": "x"}}, "logs": [], "since": 3,
                                "last_at": None, "link_stats": {}, "progress": None, "evaluator": {}}))
    mon = monitor(tmp_path)
    assert mon.step() == []
    assert {e.split(":")[1].split()[0] for e in mon.errors} <= {"ecc", "logs", "since", "evaluator"}


# -- the engine's metrics, from a real HTTP server ------------------------------------------

class Metrics:
    def __init__(self) -> None:
        self.generation = 1000
        self.stopped = threading.Event()
        self.release = threading.Event()
        metrics = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if metrics.stopped.is_set():
                    metrics.release.wait(10)           # SIGSTOP: connected, never answered
                    return
                text = ("# HELP vllm:num_requests_running Number of requests running\n"
                        f'vllm:num_requests_running{{engine="0",model_name="m"}} 2.0\n'
                        f'vllm:num_requests_running{{engine="1",model_name="m"}} 1.0\n'
                        f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {metrics.generation}.0\n')
                data = text.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def metrics():
    server = Metrics()
    yield server
    server.close()


def stall_details(mon):
    return [o["detail"] for o in mon.view()["observations"] if o["key"] == "engine.stall"]


def test_metrics_unanswered_after_answering_is_an_engine_stall(tmp_path, metrics):
    node, clock = Node(), Clock()
    mon = monitor(tmp_path, node, clock, url=metrics.url, command_timeout_s=0.5)
    mon.step()
    metrics.generation += 10
    clock.now += 10
    mon.step()
    assert stall_details(mon) == [] and mon.errors == []
    metrics.stopped.set()
    clock.now += 10
    mon.step()
    assert stall_details(mon) == ["metrics unanswered"]
    assert "no answer within 0.5 s" in mon.view()["gather_errors"][-1]
    since = mon.view()["observations"][-1]["since"]
    assert steps(mon, clock, (320,)) == [[("restart", "engine.stall", "node")]]
    assert mon.events[-1]["evidence"].endswith("no answer within 0.5 s")
    assert mon.view()["observations"][-1]["since"] == since


def test_generation_flat_with_requests_running_is_a_stall_and_a_refusal_is_not(tmp_path, metrics):
    node, clock = Node(), Clock()
    mon = monitor(tmp_path, node, clock, url=metrics.url, command_timeout_s=0.5)
    mon.step()
    clock.now += 10
    mon.step()
    assert stall_details(mon) == ["3 running, generation flat at 1000"]
    metrics.close()                                  # the engine is gone: refused, not a stall
    clock.now += 10
    mon.step()
    assert stall_details(mon) == [] and "metrics" in mon.view()["gather_errors"][-1]


def test_metrics_that_never_answered_are_no_stall(tmp_path, metrics):
    metrics.stopped.set()
    mon = monitor(tmp_path, url=metrics.url, command_timeout_s=0.3)
    mon.step()
    assert stall_details(mon) == []
