"""The gateway while one group is out of the balancer for its switch: the rendered site run
by the real nginx in front of a stand-in head on loopback whose first completion fails
(the connection closed without an answer, as a head closing an idle keep-alive connection
at that moment does). The only group left must take the next request: with nginx's
`max_fails=1` it would be taken out for fail_timeout, and every request in those 10 s
answered 502 "no live upstreams" (38 failures of a lab stream)."""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

from ascendctl.load import load_inventory
from ascendctl.render.proxy import render_site
from tests.conftest import free_port
from tests.unit.nginx_run import post, running_nginx, wait_until_answering
from tests.unit.test_playbook_rolling import group_inventory
from tests.unit.test_promotion_envelope import Head


class FailsOnce(Head):
    """A head whose first completion closes the connection unanswered; then it serves (its
    model list and answers as the admission test's head)."""

    protocol_version = "HTTP/1.1"
    posts = 0
    lock = threading.Lock()

    def do_POST(self):  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with FailsOnce.lock:
            FailsOnce.posts += 1
            first = FailsOnce.posts == 1
        if first:
            self.close_connection = True
            return
        self.answer(200, {"choices": [{"text": " ok"}]})


def statuses_after_one_failure(tmp_path: Path, site: str, listen: int) -> list[int]:
    """The statuses of three completions through SITE run by nginx, the head failing the
    first."""
    FailsOnce.posts = 0
    with running_nginx(tmp_path, site) as nginx:
        wait_until_answering(nginx, listen)
        return [post(f"http://127.0.0.1:{listen}/v1/completions", timeout=20)[0]
                for _ in range(3)]


def test_the_only_group_in_the_balancer_is_not_taken_out_by_one_failed_request(tmp_path):
    head_port, listen = free_port(), free_port()
    server = ThreadingHTTPServer(("127.0.0.1", head_port), FailsOnce)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        path = tmp_path / "inv.yaml"
        group_inventory(tmp_path, groups=2, per_group=1)
        path.write_text(path.read_text().replace(
            "proxy: {enabled: true}",
            f"port: {head_port}, proxy: {{enabled: true, port: {listen}}}"))
        inv = load_inventory(path)
        # both groups in: a failed request may take a head out (the other takes over)
        assert render_site(inv).decode().count("max_fails=1 ") == 2
        site = render_site(inv, drained={"g1"}).decode()   # g1 switches: g0 is alone
        assert f"server 127.0.0.1:{head_port} max_fails=0 " in site
        # the first request had nowhere else to go; the next ones are served
        assert statuses_after_one_failure(tmp_path / "as-rendered", site, listen) == \
            [502, 200, 200]
        # the same site with max_fails=1: the head's one failure refuses what follows
        assert statuses_after_one_failure(
            tmp_path / "max-fails-1", site.replace("max_fails=0 ", "max_fails=1 "), listen) \
            == [502, 502, 502]
    finally:
        server.shutdown()
        server.server_close()
