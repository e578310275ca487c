"""Every doctor signature against its real example lines, and against near misses that
must not match.

Example lines are verbatim: DS-01..DS-35 from the sources cited in docs/field-failures.md
section 3 (vllm-ascend / vLLM / PyTorch issues, Huawei docs, the fixtures in
tests/fixtures/), DS-36.. and the `lab:` lines from the lab's real vLLM 0.32 CPU engine
(tests/fixtures/doctor/lab_engine_journal_node*.log). Near misses are lines that look
alike but mean something else (many are also real lines from the same logs).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ascendctl.doctor.signatures import SOURCES, default_signatures, load_signatures
from ascendctl.errors import InputError

ROOT = Path(__file__).resolve().parents[2]

EXAMPLES: dict[str, list[str]] = {
    "DS-01": [
        "[PID: 749] 2025-12-29-03:16:15.787.356 Get_Socket_Timeout(EI0006): Getting socket times out. Reason: 1. The remote does not initiate a connect request. some NPUs in the cluster are abnormal.",
        "[PID: 108272] 2026-05-21-21:41:11.284.296 Communication_Error_Get_Socket(EI0006): Getting socket times out. Reason: No abnormal periods were discovered. please prioritize investigating the consistency of cluster script behaviors.",
        "[rank1]: EI0006: [PID: 1292363] 2025-04-08-18:07:20.444.436 Getting socket times out. Reason: Remote Rank did not send the data in time. Please check the reason for the rank being stuck",
    ],
    "DS-02": [
        "[ERROR] HCCL(2717288,python3):2025-07-23-03:49:57.177.194 [hccl_socket_manager.cc:778] [2734049][Wait][LinkEstablish]wait socket establish timeout, role[1] rank[12] timeout[120]",
        "[ERROR] HCCL(17528,python3):2026-03-18-10:33:52.113.403 [hccl_socket_manager.cc:797] [18744][Wait][LinkEstablish]wait socket establish timeout, role[1] rank[1] timeout[120 s]",
    ],
    "DS-03": [
        "[ERROR] HCCL(2717288,python3):2025-07-23-03:47:57.070.463 [hccl_socket.cc:100] [2717288][HcclSocket][Listen] socket type[1], listen on ip[192.168.20.160] and specific port[16666] fail. Please check the port status and whether the port is been using by other process.",
    ],
    "DS-04": [
        "[ERROR] HCCL(2717288,python3):2025-07-23-03:49:57.177.280 [hccl_socket_manager.cc:591] [2734049]   _________________________LINK_ERROR_INFO___________________________",
        "[ERROR] HCCL(17528,python3):2026-03-18-10:33:52.113.650 [hccl_socket_manager.cc:624] [18744]   |  comm error, device[1]",
    ],
    "DS-05": [
        "The error from device(chipId:5, dieId:0), serial number is 17, hccl fftsplus task timeout occurred during task execution, stream_id:7, sq_id:7, task_id:9865, stuck notify num:3, timeout:1836.[FUNC:ProcessStarsHcclFftsPlusTimeoutErrorInfo][FILE:device_error_proc.cc][LINE:1657]",
        "hccl fftsplus task timeout occurred during task execution, stream_id:9, sq_id:9, task_id:51052, stuck notify num:1, timeout=1836s.",
    ],
    "DS-06": [
        "[rank1]:[E324 13:00:25.428029551 compiler_depend.ts:574] [Rank 1] Watchdog caught collective operation timeout: WorkHCCL(SeqNum=196, OpType=ALLREDUCE, Timeout(ms)=3600000) ran for 3600185 milliseconds before timing out.",
    ],
    "DS-07": [
        "[rank1]: RuntimeError: InnerRunOpApi:torch_npu/csrc/framework/OpParamMaker.cpp:281 OPS function error: HcclAllreduce, error code is 6",
        "HCCL function error: hcclCommInitRootInfoConfig(numRanks, &rootInfo, rank, config, &(comm->hcclComm_)), error code is 15",
    ],
    "DS-08": [
        "RuntimeError: create:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:89 HCCL function error: HcclCommInitRootInfo(numRanks, &rootInfo, rank, &(comm->hcclComm_))",
    ],
    "DS-09": [
        "[rank0]:[W519 09:15:15.708102120 ProcessGroupGloo.cpp:715] Warning: Unable to resolve hostname to a (local) address. Using the loopback address as fallback. Manually set the network interface to bind to with GLOO_SOCKET_IFNAME. (function operator())",
    ],
    "DS-10": [
        "(RayWorkerWrapper pid=1890, ip=10.41.0.8) [rank8]:[E ProcessGroupGloo.cpp:144] Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error",
    ],
    "DS-11": [
        "(WorkerDict pid=904548) [E331 20:50:12.688969421 socket.cpp:1011] [c10d] The client socket has timed out after 1800000ms while trying to connect to (10.123.x.x, 38321)",
        # lab: a headless follower whose head is not running (vLLM 0.32, torch 2.13)
        "2026-11-29T10:45:13.357743+0000 node1 ascendctl-engine[1904]: [E1129 10:45:13.645503733 socket.cpp:1028] [c10d] The client socket has timed out after 40000ms while trying to connect to (198.18.2.11, 29501).",
        "2026-11-29T10:45:49.736230+0000 node1 ascendctl-engine[1904]: [E1129 10:45:49.007165566 TCPStore.cpp:328] [c10d] TCP client failed to connect/validate to host 198.18.2.11:29501 - timed out (try=1, timeout=40000ms): The client socket has timed out after 40000ms while trying to connect to (198.18.2.11, 29501).",
    ],
    "DS-12": [
        "error while attempting to bind on address ('0.0.0.0', 8000): address already in use",
        "RuntimeError: The server socket has failed to listen on any local network address. useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use",
        "OSError: [Errno 98] Address already in use",
        # lab: vllm serve with its API port held by another process
        "2026-11-29T10:35:26.432237+0000 node0 ascendctl-engine[1644]: OSError: [Errno 98] Address already in use",
    ],
    "DS-13": [
        "RuntimeError: NPU out of memory. Tried to allocate 3.47 GiB (NPU 0; 60.97 GiB total capacity; 58.92 GiB already allocated; 58.92 GiB current active; 1.66 GiB free; 58.95 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.",
    ],
    "DS-14": [
        "EL0004: [PID: 316198] 2025-09-28-07:22:29.827.496 Failed to allocate memory.",
        "        Failed to allocate resource[DeviceMemory] with info [size:2147483648]. Reason: Memory resources are exhausted.",
    ],
    "DS-15": [
        "[rank7]:[E928 07:22:40.736525688 compiler_depend.ts:429] operator():build/CMakeFiles/torch_npu.dir/compiler_depend.ts:128 NPU function error: call aclnnMoeDistributeDispatchV2 failed, error code is 207001",
        "acl Error, code: 207001 at /__w/vllm-ascend/vllm-ascend/csrc/camem_allocator.cpp:63",
    ],
    "DS-16": [
        "ERROR 08-29 09:12:59 [core.py:632] ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
    ],
    "DS-17": [
        "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be stored in KV cache (7344). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
    ],
    "DS-18": ["Available KV cache memory: -0.87 GiB"],
    "DS-19": [
        "ValueError: Free memory on device (8.0/64.0 GiB) on startup is less than desired GPU memory utilization (0.9, 57.6 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
    ],
    "DS-20": [
        "AssertionError: local_world_size (8) must be less than or equal to the number of visible devices (0).",
    ],
    "DS-21": ["dcmi module initialize failed. ret is -8005", "DrvMngGetConsoleLogLevel failed. (ret=4)"],
    "DS-22": [
        "libascend_hal.so: cannot open shared object file: No such file or directory",
        "ImportError: libatb.so: cannot open shared object file: No such file or directory",
    ],
    "DS-23": [
        "   RuntimeError: Failed to infer device type",
        "RuntimeError: Failed to load the backend extension: torch_npu. You can disable extension auto-loading with TORCH_DEVICE_BACKEND_AUTOLOAD=0.",
    ],
    "DS-24": [
        "(EngineCore_DP1 pid=235461) INFO 12-16 08:25:51 [shm_broadcast.py:466] No available shared memory broadcast block found in 60 seconds. This typically happens when some processes are hanging or d",
    ],
    "DS-25": [
        "ERROR 08-28 02:33:28 [core.py:634] RuntimeError: ACL stream synchronize failed, error code:507035",
        "[285] [2025-12-12 12:10:10:644] torch.distributed: [ERROR] [479] Find exception when finishedNPUExecutionInternal, query:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:59 NPU function error: acl::AclQueryEventRecordedStatus(event_, &currStatus), error code is 507014",
        "rtKernelLaunchWithHandleV2 failed: 507035",
    ],
    "DS-26": [
        "ERROR 08-28 02:33:28 [async_llm.py:416] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.",
        "ERROR 04-30 10:20:36 [core.py:396] EngineCore failed to start.",
        "(APIServer pid=1179246) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
        # lab
        "2026-11-29T10:39:09.851810+0000 node0 ascendctl-engine[1959]: (EngineCore pid=1959) ERROR 11-29 10:39:09 [core.py:1510] EngineCore failed to start.",
    ],
    "DS-27": [
        "[ERROR] 2025-05-29-20:52:26 (PID:1059, Device:0, RankID:-1) ERR00100 PTA call acl api failed.",
        "[ERROR] 2025-12-12-12:10:10 (PID:402, Device:7, RankID:-1) ERR02005 DIST internal error",
        "[ERROR] 2025-08-14-13:42:44 (PID:5309, Device:-1, RankID:-1) ERR99999 UNKNOWN applicaiton exception",
    ],
    "DS-28": ["DeepSeek-V3.2-W8A8-EP starts without `Remote engine must not use --headless`"],
    "DS-29": [
        "[26002.109061] Out of memory: Killed process 576419 (python) total-vm:78521468kB, anon-rss:54398260kB, file-rss:2628kB, shmem-rss:0kB, UID:1000 pgtables:119448kB oom_score_adj:0",
    ],
    "DS-30": [
        "Jan 28 10:40:08 localhost systemd[1]: vllm3.service: Main process exited, code=exited, status=1/FAILURE",
        # lab: the engine unit after `vllm serve` rejected a flag
        "2026-11-29T10:36:55.383862+0000 node0 systemd[1]: ascendctl-engine.service: Main process exited, code=exited, status=2/INVALIDARGUMENT",
    ],
    "DS-31": [
        "[WARNING]The driver package may not be completely installed, which may cause function abnormal. Please reinstall it.",
    ],
    "DS-32": ["link status: DOWN"],
    "DS-33": ["net health status: Socket fail", "net health status: Init"],
    "DS-34": [
        "dev_id:0, tls switch[0](0:disable, 1:enable), tls preconfigured[1](0:non-preset, 1:preset), tls alarm time threshold[60]days",
    ],
    "DS-35": [
        "[Error]: The aicore execution times out.",
        "        rtEventQueryStatus execute failed, reason=[aicore timeout][FUNC:FuncErrorReason][FILE:error_message_manage.cc][LINE:53]",
    ],
    "DS-36": [
        # lab: `vllm serve ... --no-such-flag` (vLLM 0.32 argparse)
        "2026-11-29T10:36:49.336327+0000 node0 ascendctl-engine[1741]: vllm: error: unrecognized arguments: --no-such-flag",
    ],
    "DS-37": [
        # lab: a weight file of the per-stage index removed from the release's model dir
        "2026-11-29T10:39:04.504893+0000 node0 ascendctl-engine[2074]: (Worker_PP0 pid=2074) ERROR 11-29 10:39:04 [multiproc_executor.py:953] FileNotFoundError: Weight files referenced in index but missing: {'/var/lib/ascendctl/releases/r-8c6f0d514326/model/model-00001-of-00004.safetensors'}",
    ],
    "DS-38": [
        # vllm/v1/executor/multiproc_executor.py raises f"RPC call to {method} timed out."
        # (kvcache-ai/Mooncake#1458 is the issue titled with it)
        "TimeoutError: RPC call to execute_model timed out.",
        # vllm/v1/engine/core_client.py (vLLM 0.32), VLLM_ENGINE_READY_TIMEOUT_S
        "TimeoutError: Timed out waiting for engine core processes to start. This is often caused by slow weight loading for large models. Waited 600s (configured by VLLM_ENGINE_READY_TIMEOUT_S). To increase the timeout, set the environment variable: VLLM_ENGINE_READY_TIMEOUT_S=<seconds>",
    ],
    "DS-39": [
        "mar 07 13:28:11 ubuntu-miniflux systemd[1]: miniflux.service: Start request repeated too quickly.",
        "Nov 29 10:50:01 node0 systemd[1]: ascendctl-engine.service: Failed with result 'start-limit-hit'.",
    ],
    "DS-40": [
        # pytorch/gloo#223
        "[<some path>/gloo/gloo/transport/tcp/pair.cc:761] connect [127.0.1.1]:60817: Connection refused",
        # lab: the follower after its head crashed on a missing weight file
        "2026-11-29T10:39:09.954946+0000 node1 ascendctl-engine[1589]: (Worker_PP1 pid=1589) ERROR 11-29 10:39:09 [multiproc_executor.py:953] RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [198.18.2.11]:3465. This is typically caused by a remote worker crashing. Check the logs of the remote worker before reporting an error. GLHF! 🏖️",
    ],
}

NEAR_MISSES: dict[str, list[str]] = {
    "DS-01": ["EI00061 is not a code", "error code EI0005: the operator is unsupported"],
    "DS-02": ["[Wait][LinkEstablish]socket establish done, role[1] rank[12]"],
    "DS-03": ["[HcclSocket][Listen] socket type[1], listen on ip[192.168.20.160] and specific port[16666] success"],
    "DS-04": ["LINK_ERROR_INFO", "|  comm ok, device[1]"],
    "DS-05": ["hccl task timeout configured: 1836"],
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
    "DS-19": ["Free memory on device (60.0/64.0 GiB) on startup"],
    "DS-20": ["local_world_size (8) equals the number of visible devices (8)"],
    "DS-21": ["dcmi module initialize success", "ret is -8006"],
    "DS-22": ["libhccl.so loaded from /usr/local/Ascend/ascend-toolkit/latest/lib64/libhccl.so"],
    "DS-23": ["INFO 05-21 21:35:43 [__init__.py:239] Platform plugin ascend is activated"],
    "DS-24": ["shared memory broadcast block found in 1 ms"],
    "DS-25": ["error code is 107001", "ACL stream synchronize failed, error code:100000", "pid 507035 exited"],
    "DS-26": ["(EngineCore pid=1352) INFO 11-29 10:34:49 [core.py:1454] [shutdown] EngineCore: trigger received signal=SIGTERM"],
    "DS-27": ["ERR00100 resolved"],
    "DS-28": ["Launching vLLM (v0.32.0) headless multiproc executor"],
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
    "DS-35": ["The aicore execution finished in 3 ms"],
    "DS-36": ["usage: vllm [-h] [-v]", "warning: unrecognized environment variable VLLM_FOO"],
    "DS-37": ["Loading weights took 1.23 seconds", "Weight files referenced in index: 4"],
    "DS-38": ["RPC call to execute_model took 12 ms", "VLLM_RPC_TIMEOUT=100000"],
    "DS-39": ["ascendctl-engine.service: Failed with result 'exit-code'."],
    "DS-40": ["[../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error"],
}


def test_the_table_holds_at_least_the_required_signatures():
    table = default_signatures()
    assert len(table) >= 15
    ids = [s.id for s in table]
    assert len(set(ids)) == len(ids)
    assert set(ids) == set(EXAMPLES), "every signature needs its real example lines here"
    for sig in table:
        assert sig.cause and sig.fix and sig.title and sig.refs, sig.id
        assert set(sig.sources) <= set(SOURCES)


@pytest.mark.parametrize("sig_id", sorted(EXAMPLES))
def test_signature_matches_its_real_example_lines(sig_id):
    sig = {s.id: s for s in default_signatures()}[sig_id]
    for line in EXAMPLES[sig_id]:
        assert sig.search(line), f"{sig_id} does not match its example: {line}"


@pytest.mark.parametrize("sig_id", sorted(NEAR_MISSES))
def test_signature_ignores_near_misses(sig_id):
    sig = {s.id: s for s in default_signatures()}[sig_id]
    for line in NEAR_MISSES[sig_id]:
        assert not sig.search(line), f"{sig_id} matched a near miss: {line}"


def test_every_example_is_claimed_by_its_own_signature_only():
    """An example line of one signature is not a (non-umbrella) match of an unrelated one,
    except where the sources themselves overlap: a communicator-init call that fails with
    an HCCL return code is both DS-07 (the return code) and DS-08 (comm init)."""
    table = [s for s in default_signatures() if not s.umbrella]
    allowed = {("DS-07", "DS-08")}
    for sig_id, lines in EXAMPLES.items():
        for line in lines:
            others = {s.id for s in table if s.id != sig_id and s.search(line)}
            assert not {o for o in others if (sig_id, o) not in allowed}, (sig_id, others, line)


def test_named_groups_extract_the_values_doctor_reports():
    table = {s.id: s for s in default_signatures()}
    m = table["DS-11"].search(EXAMPLES["DS-11"][1])
    assert (m.group("host"), m.group("port"), m.group("ms")) == ("198.18.2.11", "29501", "40000")
    m = table["DS-02"].search(EXAMPLES["DS-02"][1])
    assert m.group("timeout_s") == "120"
    m = table["DS-37"].search(EXAMPLES["DS-37"][0])
    assert "model-00001-of-00004.safetensors" in m.group("files")
    m = table["DS-36"].search(EXAMPLES["DS-36"][0])
    assert m.group("args") == "--no-such-flag"


def test_lab_journals_contain_the_lab_example_lines():
    """The lab lines above are verbatim from the captured journals."""
    text = "".join((ROOT / "tests/fixtures/doctor" / f"lab_engine_journal_{n}.log").read_text()
                   for n in ("node0", "node1"))
    lab_lines = [line for lines in EXAMPLES.values() for line in lines
                 if re.match(r"^2026-11-29T\S+ node\d ", line)]
    assert len(lab_lines) >= 8
    for line in lab_lines:
        if "start-limit-hit" in line:
            continue
        assert line in text, line


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


def test_docs_list_every_signature():
    doc = (ROOT / "docs/operations.md").read_text()
    missing = [s.id for s in default_signatures() if f"| {s.id} |" not in doc]
    assert missing == []
