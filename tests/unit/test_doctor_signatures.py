"""Every doctor signature against real log lines, and against near misses that must not
match.

The lines are in tests/fixtures/doctor/public_lines.yaml, each with its source: a public
issue (owner/repo#number, the post, the date), the lab's journals, a vendor document, or -
marked `format` - a line constructed from the cited source format string where no real
line could be found. Each signature must match every line and extract exactly the fields
listed. Near misses are lines that look alike but mean something else (many are real
lines from the same sources).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from ascendctl.doctor.signatures import SOURCES, default_signatures, load_signatures
from ascendctl.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests/fixtures/doctor/public_lines.yaml"
PUBLIC_LINES = yaml.safe_load(FIXTURE.read_text())
KINDS = {"public", "lab", "doc", "cited", "format"}
SOURCE_REF = re.compile(r"^[\w.-]+/[\w.-]+#\d+$")
TABLE = {s.id: s for s in default_signatures()}
# signatures no public issue shows a line of (the fixture says what was searched)
NO_PUBLIC_LINE = {"DS-31", "DS-32", "DS-33", "DS-34", "DS-37"}


def lines_of(sig_id: str, *kinds: str) -> list[dict]:
    return [item for item in PUBLIC_LINES[sig_id]["lines"] if not kinds or item["kind"] in kinds]


NEAR_MISSES: dict[str, list[str]] = {
    "DS-01": ["EI00061 is not a code", "error code EI0005: the operator is unsupported"],
    "DS-02": ["[Wait][LinkEstablish]socket establish done, role[1] rank[12]"],
    "DS-03": ["[HcclSocket][Listen] socket type[1], listen on ip[192.168.20.160] and specific port[16666] success"],
    "DS-04": ["LINK_ERROR_INFO", "|  comm ok, device[1]"],
    "DS-05": [
        "hccl task timeout configured: 1836",
        # real (Ascend/pytorch#54): the stream waiting on the stuck HCCL task, not the HCCL timeout
        "        The error from device(chipId:2, dieId:0), serial number is 10, event wait timeout occurred during task execution, stream_id:4, sq_id:4, task_id:42015, event_id=970, timeout=1868.[FUNC:ProcessStarsWaitTimeoutErrorInfo][FILE:device_error_proc.cc][LINE:1395]",
    ],
    "DS-06": ["Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600010 milliseconds"],
    "DS-07": ["OPS function error: HcclAllreduce"],
    "DS-08": ["HCCL function ok: HcclCommInitRootInfo"],
    "DS-09": ["Using GLOO_SOCKET_IFNAME=host0 (address 198.18.2.11)"],
    "DS-10": ["Gloo connectFullMesh succeeded"],
    "DS-11": [
        # real, on every healthy lab start: a reverse lookup, not a failure to connect
        "2026-11-29T10:41:08.894351+0000 node1 ascendctl-engine[1691]: [W1129 10:41:08.178436735 socket.cpp:207] [c10d] The hostname of the client socket cannot be retrieved. err=-3",
        "[c10d] The client socket has connected to (198.18.2.11, 29501)",
    ],
    "DS-12": [
        "INFO:     Started server process [1644]; address in use by this process only",
        # real (vLLM 0.32 start-up warning): mentions OSError, is not a port clash
        "(APIServer pid=1880) WARNING 11-29 10:37:29 [system_utils.py:255] Found ulimit of 20000 and failed to automatically increase with error current limit exceeds maximum limit. This can cause fd limit errors like `OSError: [Errno 24] Too many open files`. Consider increasing with ulimit -n",
    ],
    "DS-13": ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 79.15 GiB total capacity"],
    "DS-14": ["EL0004 cleared", "Failed to allocate resource[HostMemory] with info [size:1]"],
    "DS-15": ["error code is 2070011", "Checkpoint 207001 loaded"],
    "DS-16": ["Available memory for the cache blocks: 12.5 GiB"],
    "DS-17": ["max seq len (32768) fits in KV cache (65536)"],
    "DS-18": ["Available KV cache memory: 12.87 GiB"],
    "DS-19": [
        "Free memory on device (60.0/64.0 GiB) on startup",
        # real (vllm-project/vllm-ascend PR 8289, its test log): the start-up report, not a refusal
        "(EngineCore pid=2884597) INFO 04-15 06:30:01 [worker.py:575] Free memory on device (60.86/61.27 GiB) on startup. Desired GPU memory utilization is (0.9, 55.14 GiB). Actual usage: 1.14 GiB for weights, 0.22 GiB for peak activation, 0.13 GiB for non-torch memory, 0.04 GiB for NPU graph memory.",
    ],
    "DS-20": ["local_world_size (8) equals the number of visible devices (8)"],
    "DS-21": ["dcmi module initialize success", "ret is -8006"],
    "DS-22": [
        "libhccl.so loaded from /usr/local/Ascend/ascend-toolkit/latest/lib64/libhccl.so",
        # real (vllm-project/vllm-ascend#6949): Mooncake's transport library, not CANN's
        "ImportError: ascend_transport.so: cannot open shared object file: No such file or directory",
        # real (vllm-project/vllm-ascend#1305): a harmless warning on Ascend
        "WARNING 06-16 15:10:59 [_custom_ops.py:21] Failed to import from vllm._C with ImportError('libcudart.so.12: cannot open shared object file: No such file or directory')",
    ],
    "DS-23": ["INFO 05-21 21:35:43 [__init__.py:239] Platform plugin ascend is activated"],
    "DS-24": ["shared memory broadcast block found in 1 ms"],
    "DS-25": [
        "error code is 107001", "ACL stream synchronize failed, error code:100000",
        "pid 507035 exited",
        # real (Ascend/pytorch#54): a 107xxx runtime result
        "        synchronize stream failed, runtime result = 107020[FUNC:ReportCallError][FILE:log_inner.cpp][LINE:161]",
    ],
    "DS-26": ["(EngineCore pid=1352) INFO 11-29 10:34:49 [core.py:1454] [shutdown] EngineCore: trigger received signal=SIGTERM"],
    "DS-27": ["ERR00100 resolved"],
    "DS-28": [
        "Launching vLLM (v0.32.0) headless multiproc executor",
        # real (vllm-project/vllm-ascend PR 16204, test plan): a quote, not vLLM's message
        "DeepSeek-V3.2-W8A8-EP starts without `Remote engine must not use --headless`",
    ],
    "DS-29": ["Out of memory: Kill process 576419 (python) score 0 or sacrifice child was not needed"],
    "DS-30": [
        # real: a normal `systemctl stop` of the engine (SIGTERM) is not a crash
        "2026-11-29T10:36:14.148480+0000 node0 systemd[1]: ascendctl-engine.service: Main process exited, code=exited, status=143/n/a",
        "node0 systemd[1]: ascendctl-engine.service: Main process exited, code=killed, status=15/TERM",
        "2026-11-29T10:34:51.247342+0000 node0 systemd[1]: ascendctl-engine.service: Deactivated successfully.",
    ],
    "DS-31": ["[INFO]The driver package is completely installed"],
    "DS-32": ["link status: UP", "link status: DOWN since yesterday"],
    "DS-33": ["net health status: Success"],
    "DS-34": ["dev_id:0, tls preconfigured[1](0:non-preset, 1:preset)"],
    "DS-35": [
        "The aicore execution finished in 3 ms",
        # real (Ascend/pytorch#54): the task timeout that follows an HCCL timeout (DS-05)
        "        rtStreamSynchronizeWithTimeout execute failed, reason=[task timeout][FUNC:FuncErrorReason][FILE:error_message_manage.cc][LINE:53]",
    ],
    "DS-36": [
        "warning: unrecognized environment variable VLLM_FOO",
        # real (vllm-project/vllm#34545): the usage line printed before the error
        "usage: vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ...",
    ],
    "DS-37": ["Loading weights took 1.23 seconds", "Weight files referenced in index: 4"],
    "DS-38": ["RPC call to execute_model took 12 ms", "VLLM_RPC_TIMEOUT=100000"],
    "DS-39": ["ascendctl-engine.service: Failed with result 'exit-code'."],
    "DS-40": ["[../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error"],
}


def test_every_signature_has_lines_and_near_misses():
    table = default_signatures()
    ids = [s.id for s in table]
    assert len(ids) >= 40 and len(set(ids)) == len(ids)
    assert set(ids) == set(PUBLIC_LINES) == set(NEAR_MISSES)
    for sig in table:
        assert sig.cause and sig.fix and sig.title and sig.refs, sig.id
        assert set(sig.sources) <= set(SOURCES)


@pytest.mark.parametrize("sig_id", sorted(PUBLIC_LINES))
def test_signature_matches_its_lines_and_extracts_their_fields(sig_id):
    sig = TABLE[sig_id]
    items = lines_of(sig_id)
    assert items
    for item in items:
        match = sig.search(item["line"])
        assert match, f"{sig_id} does not match its {item['kind']} line from {item['source']}"
        assert sig.values(match) == item["fields"], (sig_id, item["source"])


@pytest.mark.parametrize("sig_id", sorted(PUBLIC_LINES))
def test_each_line_says_where_it_comes_from(sig_id):
    entry = PUBLIC_LINES[sig_id]
    for item in entry["lines"]:
        assert item["kind"] in KINDS, item
        assert item["source"] and item["where"], item
        if item["kind"] == "public":
            assert SOURCE_REF.match(item["source"]), item["source"]
    public = lines_of(sig_id, "public")
    if sig_id in NO_PUBLIC_LINE:
        # none found: the fixture says so, what was searched, and the format followed
        assert not public and entry["public"] == "none", sig_id
        assert entry["searched"] and entry["format"], sig_id
    else:
        assert public, f"{sig_id} has no line from a public issue"
        assert "public" not in entry


def test_most_signatures_are_held_against_a_line_from_a_public_issue():
    with_public = [s for s in PUBLIC_LINES if lines_of(s, "public")]
    assert len(with_public) == len(PUBLIC_LINES) - len(NO_PUBLIC_LINE) >= 35


def test_lab_lines_are_verbatim_in_the_lab_journals():
    text = "".join((ROOT / "tests/fixtures/doctor" / f"lab_engine_journal_{n}.log").read_text()
                   for n in ("node0", "node1"))
    lab = [item for sig_id in PUBLIC_LINES for item in lines_of(sig_id, "lab")]
    assert len(lab) >= 8
    for item in lab:
        assert item["line"] in text, item["line"]


@pytest.mark.parametrize("sig_id", sorted(NEAR_MISSES))
def test_signature_ignores_near_misses(sig_id):
    sig = TABLE[sig_id]
    for line in NEAR_MISSES[sig_id]:
        assert not sig.search(line), f"{sig_id} matched a near miss: {line}"


def test_every_line_is_claimed_by_its_own_signature_only():
    """A line of one signature is no (non-umbrella) match of an unrelated one, except
    where the sources overlap: a communicator-init call that fails with an HCCL return
    code is both DS-07 (the return code) and DS-08 (comm init)."""
    table = [s for s in default_signatures() if not s.umbrella]
    allowed = {("DS-07", "DS-08")}
    for sig_id in PUBLIC_LINES:
        for item in lines_of(sig_id):
            others = {s.id for s in table if s.id != sig_id and s.search(item["line"])}
            assert not {o for o in others if (sig_id, o) not in allowed}, (sig_id, others)


def test_ds28_matches_vllms_real_message_and_its_other_variant():
    """vLLM's wait_for_engine_startup raises f"Remote engine {eng_index} must not use
    --headless in external or hybrid dp lb mode" (and "... must use --headless unless in
    ..."): the old pattern, without the engine index, matched neither."""
    sig = TABLE["DS-28"]
    real = lines_of("DS-28", "public")[0]["line"]
    assert sig.values(sig.search(real)) == {"engine": "1", "need": "not use"}
    assert not re.search("Remote engine must not use --headless", real)
    other = "RuntimeError: Remote engine 3 must use --headless unless in external or hybrid dp lb mode"
    assert sig.values(sig.search(other)) == {"engine": "3", "need": "use"}


def test_ds05_reads_the_timeout_with_its_unit():
    """timeout:30min(default) is 1800 s, not 30 s; timeout:1836 and timeout=1836s are 1836 s."""
    sig = TABLE["DS-05"]
    by_source = {item["source"]: sig.values(sig.search(item["line"]))
                 for item in lines_of("DS-05", "public")}
    assert by_source["Ascend/pytorch#54"]["timeout_s"] == 1800
    assert by_source["Ascend/pytorch#54"]["timeout_default"] == "(default)"
    assert by_source["InternLM/lmdeploy#3354"]["timeout_s"] == 1836
    assert by_source["vllm-project/vllm-ascend#16646"]["timeout_s"] == 1836
    assert by_source["vllm-project/vllm-ascend#12487"]["timeout_s"] == 204


def test_every_signature_has_a_literal_prefilter():
    """Every regex runs only on lines holding one of its literals (see anchors.py): no
    signature may lose that, or the scan of a large log slows down for all of them."""
    for sig in default_signatures():
        assert sig.anchors, sig.id
        assert all(len(a) >= 3 for a in sig.anchors), sig.id
        for item in lines_of(sig.id):
            assert sig.may_match(item["line"]), sig.id
            assert sig.may_match_utf8(item["line"].encode()), sig.id


def test_the_prefilter_never_hides_a_match_on_real_lines():
    """On every real line we have (fixtures and lab journals), a regex match implies the
    literal prefilter passes: the prefilter is exact, not a heuristic."""
    journals = [line for n in ("node0", "node1") for line in
                (ROOT / "tests/fixtures/doctor" / f"lab_engine_journal_{n}.log")
                .read_text().splitlines()]
    lines = journals + [item["line"] for s in PUBLIC_LINES for item in lines_of(s)]
    lines += [line for misses in NEAR_MISSES.values() for line in misses]
    hidden = [(sig.id, line) for sig in default_signatures() for line in lines
              if sig.pattern.search(line) and not sig.may_match(line)]
    assert hidden == []


def test_a_bad_table_is_refused_with_file_and_entry(tmp_path):
    bad = tmp_path / "sigs.yaml"
    bad.write_text("- {id: X-1, title: t, severity: fatal, sources: [journal], regex: a, "
                   "cause: c, fix: f}\n")
    with pytest.raises(InputError, match=r"sigs.yaml: X-1.severity: severity must be one of"):
        load_signatures(bad)
    bad.write_text("- {id: X-1, title: t, severity: error, sources: [journal], regex: '(', "
                   "cause: c, fix: f}\n")
    with pytest.raises(InputError, match=r"X-1.regex: bad regex"):
        load_signatures(bad)
    bad.write_text("- {id: X-1, title: t, severity: error, sources: [journal], regex: a, "
                   "cause: c, fix: f, compare: tls}\n")
    with pytest.raises(InputError, match=r"compare names a group"):
        load_signatures(bad)
    bad.write_text("- {id: X-1, title: t, severity: error, sources: [journal], "
                   "regex: 'after (?P<t>\\d+)', cause: c, fix: f, durations: {x: s}}\n")
    with pytest.raises(InputError, match=r"X-1.durations: durations names a group"):
        load_signatures(bad)
    bad.write_text("- {id: X-1, title: t, severity: error, sources: [journal], "
                   "regex: 'after (?P<t>\\d+)', cause: c, fix: f, durations: {t: fortnights}}\n")
    with pytest.raises(InputError, match=r"X-1.durations.t: unknown unit"):
        load_signatures(bad)


def test_docs_list_every_signature_with_its_title():
    doc = (ROOT / "docs/operations.md").read_text()
    missing = [s.id for s in default_signatures() if f"| {s.id} | {s.title}" not in doc]
    assert missing == []
