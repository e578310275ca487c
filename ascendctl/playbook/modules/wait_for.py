"""wait_for: a TCP port or an HTTP URL, polled ON THE NODE in one remote execution.

The loop runs in the node's Python (the inventory's deploy.python), so waiting costs
one round trip however long it takes, and the check sees what the node sees.
"""

from __future__ import annotations

import json
from typing import Any, Literal, Optional

from ascendctl_runtime.nodeutil import host_port_text
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ascendctl.playbook.modules.base import (
    Module, ModuleContext, ModuleResult, command_data, register_module,
)

WAIT_SCRIPT = r"""
import json, socket, sys, time, urllib.error, urllib.request
kind, host, port, url, status, state, timeout, delay, sleep = sys.argv[1:10]
port, status = int(port or 0), int(status or 200)
timeout, delay, sleep = float(timeout), float(delay), float(sleep)
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
def probe(remaining):
    budget = max(0.2, min(5.0, remaining))
    if kind == "port":
        try:
            socket.create_connection((host, port), timeout=budget).close()
            return True, "port %d open" % port
        except OSError as err:
            return False, "port %d: %s" % (port, err.strerror or err)
    try:
        with opener.open(url, timeout=budget) as resp:
            code = resp.status
    except urllib.error.HTTPError as err:
        code = err.code
    except Exception as err:
        return False, "%s: %s" % (url, getattr(err, "reason", err))
    return code == status, "%s answered %d" % (url, code)
time.sleep(delay)
start = time.monotonic()
deadline = start + timeout
while True:
    ok, detail = probe(deadline - time.monotonic())
    if ok == (state == "started"):
        print(json.dumps({"ok": True, "elapsed": round(time.monotonic() - start, 3), "detail": detail}))
        sys.exit(0)
    if time.monotonic() >= deadline:
        print(json.dumps({"ok": False, "elapsed": round(time.monotonic() - start, 3), "detail": detail}))
        sys.exit(1)
    time.sleep(min(sleep, max(0.0, deadline - time.monotonic())))
"""


@register_module("wait_for")
class WaitFor(Module):
    """Wait until a TCP port opens (or closes), or a URL answers with a given HTTP status."""

    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")
        port: Optional[int] = Field(default=None, ge=1, le=65535)
        host: str = "127.0.0.1"
        url: Optional[str] = None
        status: int = Field(default=200, ge=100, le=599)
        state: Literal["started", "stopped"] = "started"
        timeout: float = Field(default=300, gt=0)
        delay: float = Field(default=0, ge=0)
        sleep: float = Field(default=1, gt=0)
        python: Optional[str] = None

        @model_validator(mode="after")
        def _one(self) -> "WaitFor.Args":
            if (self.port is None) == (self.url is None):
                raise ValueError("give exactly one of `port` or `url`")
            if self.url is not None and not self.url.startswith(("http://", "https://")):
                raise ValueError("url must start with http:// or https://")
            return self

    supports_check = False

    def run(self, ctx: ModuleContext, args: Any) -> ModuleResult:
        python = args.python or ctx.inventory.deploy.python
        kind = "port" if args.port is not None else "url"
        res = ctx.run([python, "-c", WAIT_SCRIPT, kind, args.host, str(args.port or ""),
                       args.url or "", str(args.status), args.state, str(args.timeout),
                       str(args.delay), str(args.sleep)],
                      timeout=args.delay + args.timeout + 30)
        try:
            outcome = json.loads(res.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            result = ModuleResult.from_command(res, changed=False)
            result.msg = f"wait_for could not run {python} on the node: {result.msg}"
            return result
        data = {**command_data(res), "elapsed": outcome["elapsed"], "detail": outcome["detail"]}
        target = args.url or host_port_text(args.host, args.port)
        if outcome["ok"]:
            return ModuleResult(msg=f"{outcome['detail']} after {outcome['elapsed']}s",
                                data=data)
        return ModuleResult(failed=True, data=data,
                            msg=f"timed out after {args.timeout:g}s waiting for {target} to be "
                            f"{args.state}: {outcome['detail']}")
