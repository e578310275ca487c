"""The Remote protocol: the local implementation runs real `sh`, quotes like SSH does,
and carries the node runtime (release_ops) exactly as a node would; the pool runs work
over remotes within --forks, nested maps included."""

from __future__ import annotations

import threading
import time

import pytest

from ascendctl.transport import HostConnection, LocalRemote, Remote, local_pool
from ascendctl.transport.errors import ConnectError


def test_both_implementations_satisfy_the_protocol():
    assert isinstance(LocalRemote(), Remote)
    for name in ("exec", "run", "run_shell", "run_script", "write_file", "reconnect",
                 "become_command", "open", "close"):
        assert callable(getattr(HostConnection, name))


def test_values_arrive_as_literal_words(tmp_path):
    canary = tmp_path / "canary"
    hostile = f"a b; touch {canary} $(touch {canary}) `touch {canary}` '\""
    with LocalRemote("here") as remote:
        echoed = remote.run(["printf", "%s\\n", hostile, "--", "-x"])
        assert echoed.ok and echoed.stdout.splitlines() == [hostile, "--", "-x"]
        shell = remote.run_shell('printf "%s|" "$1" "$2"', [hostile, "two"])
        assert shell.stdout == f"{hostile}|two|"
        script = remote.run_script('read -r line || true\necho "got:$1:$line"', [hostile])
        assert script.stdout == f"got:{hostile}:\n"     # the script's stdin is /dev/null
        fed = remote.run(["cat"], stdin=b"from stdin\n")
        assert fed.stdout == "from stdin\n"
        assert remote.run(["sh", "-c", "exit 7"]).exit_status == 7
        assert remote.exec_count == 5
    assert not canary.exists()


def test_write_file_is_atomic_and_reports_change(tmp_path):
    target = tmp_path / "x.conf"
    with LocalRemote() as remote:
        assert remote.write_file(str(target), "a=1\n", mode=0o640) is True
        assert remote.write_file(str(target), "a=1\n", mode=0o640) is False
        assert target.read_text() == "a=1\n" and oct(target.stat().st_mode & 0o777) == "0o640"


def test_timeout_kills_the_command_and_cancel_interrupts():
    cancel = threading.Event()
    remote = LocalRemote("here", cancel=cancel)
    started = time.monotonic()
    result = remote.run(["sleep", "30"], timeout=0.5)
    assert result.timed_out and result.exit_status is None
    assert time.monotonic() - started < 5
    threading.Timer(0.3, cancel.set).start()
    with pytest.raises(ConnectError, match="interrupted"):
        remote.run(["sleep", "30"])
    cancel.clear()
    remote.close()
    with pytest.raises(ConnectError):
        remote.run(["true"])
    remote.reconnect()
    assert remote.run(["true"]).ok


def test_nested_map_in_a_worker_does_not_deadlock_with_one_fork():
    pool = local_pool(["a", "b", "c"], forks=1)
    with pool:
        outer = pool.map(lambda conn: sorted(
            r.value for r in pool.map(lambda inner: inner.name * 2).values()))
    assert {name: r.value for name, r in outer.items()} == {
        n: ["aa", "bb", "cc"] for n in ("a", "b", "c")}


def test_call_runs_in_this_thread_and_classifies_errors():
    pool = local_pool(["a"])
    here = threading.current_thread()
    with pool:
        assert pool.call("a", lambda conn: threading.current_thread() is here).value is True
        failed = pool.call("a", lambda conn: 1 / 0)
        assert not failed.ok and "ZeroDivisionError" in failed.error
        pool.cancel.set()
        assert pool.call("a", lambda conn: 1).status.value == "unreachable"


def test_the_node_runtime_runs_through_a_local_remote(tmp_path):
    import sys

    from ascendctl.deploy.nodeops import NodeOps
    from ascendctl.render.files import RenderedFile

    with LocalRemote("node0") as remote:
        ops = NodeOps(remote, node="node0", root=str(tmp_path), python=sys.executable)
        staged = ops.stage("r-1", [RenderedFile("engine.env", b"A=1\n")], {"by": "t"},
                           check=False, diff=True)
        assert staged.changed and staged.files[0].path == "engine.env"
        assert ops.switch("r-1").changed
        state = ops.state([])
        assert state.current == "r-1" and state.release("r-1").status == "active"
        assert state.lock is None and state.leftovers == ()
        assert ops.prune(5, ["r-1"]).removed == ()
