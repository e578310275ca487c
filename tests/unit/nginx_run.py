"""The real nginx with a rendered site: the prefix and the nginx.conf that includes the
site (for `nginx -t`), and nginx run in the foreground on it (for the tests that send it
requests). Stopped when the block ends, whatever the test did."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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
