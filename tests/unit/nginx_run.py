"""The real nginx with a rendered site: the prefix and the nginx.conf that includes the
site (for `nginx -t`), and nginx run in the foreground on it (for the tests that send it
requests). Stopped when the block ends, whatever the test did. And what those tests send
it."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.unit.test_render_validators import tool


def nginx_conf(prefix: Path, site: str) -> Path:
    """PREFIX laid out for nginx, SITE written to site.conf: the nginx.conf including it."""
    (prefix / "logs").mkdir(parents=True)
    (prefix / "site.conf").write_text(site)
    conf = prefix / "nginx.conf"
    conf.write_text(f"pid {prefix}/nginx.pid;\nerror_log {prefix}/logs/error.log;\n"
                    f"events {{}}\nhttp {{\n  access_log off;\n  include {prefix}/site.conf;\n}}\n")
    return conf


@contextmanager
def running_nginx(prefix: Path, site: str) -> Iterator[subprocess.Popen[bytes]]:
    """The real nginx serving SITE from PREFIX (one process, in the foreground, its stderr
    a pipe), terminated when the block ends."""
    conf = nginx_conf(prefix, site)
    nginx = subprocess.Popen([tool("nginx"), "-c", str(conf), "-p", str(prefix), "-g",
                              "daemon off; master_process off;"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield nginx
    finally:
        nginx.terminate()
        nginx.wait(timeout=10)


def wait_until_answering(nginx: subprocess.Popen[bytes], listen: int,
                         limit_s: float = 20) -> None:
    """Until nginx on 127.0.0.1:LISTEN answers a model list (it runs the site)."""
    deadline = time.monotonic() + limit_s
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{listen}/v1/models", timeout=5):
                return
        except OSError:
            assert nginx.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)


def post(url: str, timeout: float = 30) -> tuple[int, dict, Any]:
    """A small completion to URL: status, headers, and the body (JSON, or nginx's own page
    as text)."""
    request = urllib.request.Request(url, data=b'{"prompt": "hi", "max_tokens": 4}',
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, headers, raw = response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as err:
        status, headers, raw = err.code, dict(err.headers), err.read()
    try:
        return status, headers, json.loads(raw)
    except ValueError:
        return status, headers, raw.decode(errors="replace")
