"""The gateway's watcher: takes a serving group out of nginx's balancer when one of its
nodes is in maintenance (maintenance.py), and puts it back once the node is returned and
the group's head answers /health again. Runs in the gateway host's exporter process, next
to the node agent (`--gateway <release>/gateway.json`); no controller is needed, so a
node the fault policy drains leaves the balancer within a few seconds.

It changes only the groups it took out itself: a group a rolling deploy has marked `down`
stays as the deploy left it. The site is edited line by line (the `server` line after
`# serving group NAME:`, as templates/nginx/ascendctl.conf.j2 writes it) and applied by
proxy_node.apply: `nginx -t`, a graceful reload, the old workers finish their requests.
What it did is in <root>/health/gateway.json (served as /health/gateway), which the
group's supervisor reads before it drains the group.
"""

from __future__ import annotations

import base64
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Set, Tuple

from ascendctl_runtime import healthstore, layout, proxy_node
from ascendctl_runtime.contract import GatewayConfig
from ascendctl_runtime.nodeutil import fetch_json, repeat, say

GROUP_MARK = "# serving group "


def _group_of_comment(line: str) -> Optional[str]:
    text = line.strip()
    if not text.startswith(GROUP_MARK):
        return None
    name = text[len(GROUP_MARK):].split(":", 1)[0].strip()
    return name or None


def _lines(site: str) -> Iterator[Tuple[str, Optional[str]]]:
    """Each line of SITE, with the group whose `server` line it is (None for the others)."""
    group = None
    for line in site.splitlines(keepends=True):
        named = _group_of_comment(line)
        stripped = line.strip()
        if named is not None:
            group = named
            yield line, None
        elif group is not None and stripped.startswith("server ") and stripped.endswith(";"):
            yield line, group
            group = None
        else:
            yield line, None


def _is_down(line: str) -> bool:
    return "down" in line.strip()[:-1].split()


def marked_down(site: str) -> Set[str]:
    """The groups whose server line carries `down` in SITE."""
    return {group for line, group in _lines(site) if group is not None and _is_down(line)}


def max_fails(live: int) -> int:
    """nginx's `max_fails` for a group's server line while LIVE groups are in the balancer.
    With another group to take the traffic, one failed request takes a head out for
    fail_timeout (a restarting or powered-off head costs each request a refused connect, or
    the connect timeout, only once). The only group left is never taken out: nginx would
    answer every request 502 ("no live upstreams") for fail_timeout after a single failed
    one, where the head would have served them (seen on the lab: 38 failures in a stream
    while the other group was out for its switch)."""
    return 1 if live > 1 else 0


MAX_FAILS = "max_fails="


def mark(site: str, down: Iterable[str], up: Iterable[str]) -> str:
    """SITE with the server lines of the groups in DOWN marked `down` and of those in UP
    not, each with the `max_fails` of the groups then live; every other line as it was."""
    down, up = set(down), set(up)
    lines = list(_lines(site))
    out_of_balancer = {group for line, group in lines if group is not None and
                       (group in down or (group not in up and _is_down(line)))}
    live = sum(1 for _, group in lines if group is not None and group not in out_of_balancer)
    out = []
    for line, group in lines:
        if group is not None:
            indent = line[:len(line) - len(line.lstrip())]
            ending = line[len(line.rstrip("\r\n")):]
            words = [f"{MAX_FAILS}{max_fails(live)}" if w.startswith(MAX_FAILS) else w
                     for w in line.strip()[:-1].split() if w != "down"]
            if group in out_of_balancer:
                words.append("down")
            line = f"{indent}{' '.join(words)};{ending}"
        out.append(line)
    return "".join(out)


def answers_health(url: str, timeout: float) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return bool(response.status == 200)
    except (OSError, ValueError):
        return False


class GatewayWatcher:
    def __init__(self, config: GatewayConfig, *,
                 fetch: Callable[[str, float], Optional[Dict[str, Any]]] = fetch_json,
                 healthy: Callable[[str, float], bool] = answers_health,
                 apply: Callable[[str, str], Dict[str, Any]] = proxy_node.apply,
                 read_site: Optional[Callable[[str], Optional[str]]] = None,
                 clock: Callable[[], float] = time.time):
        self.config = config
        self.fetch, self.healthy, self.apply, self.clock = fetch, healthy, apply, clock
        self.read_site = read_site or _read_text
        self.state_path = healthstore.health_path(config.root, layout.GATEWAY_STATE)
        saved = healthstore.read_json(self.state_path) or {}
        self.ours: Set[str] = {str(g) for g in saved.get("out") or []
                               if any(g == group.name for group in config.groups)}
        self.pool = ThreadPoolExecutor(max_workers=4)
        self.lock = threading.Lock()
        self.view: Dict[str, Any] = {"out": sorted(self.ours)}

    def maintenance(self) -> Dict[str, Optional[Dict[str, str]]]:
        """Per group: {node: state} of its nodes in maintenance ({} none; None when a node
        did not answer and none of the others is in maintenance: unknown)."""
        urls = [(group.name, node, url) for group in self.config.groups
                for node, url in zip(group.nodes, group.state_urls)]
        answers = list(self.pool.map(
            lambda item: self.fetch(item[2], self.config.state_timeout_s), urls))
        found: Dict[str, Optional[Dict[str, str]]] = {g.name: {} for g in self.config.groups}
        unknown: Set[str] = set()
        for (group, node, _url), answer in zip(urls, answers):
            if answer is None:
                unknown.add(group)
                continue
            record = answer.get("maintenance")
            if isinstance(record, dict):
                found[group][node] = str(record.get("state") or "drained")  # type: ignore[index]
        for group in unknown:
            if not found[group]:
                found[group] = None
        return found

    def step(self) -> Dict[str, Any]:
        now = self.clock()
        maintenance = self.maintenance()
        site = self.read_site(self.config.site_path)
        view: Dict[str, Any] = {"checked_at": round(now, 3), "maintenance": maintenance,
                                "error": None}
        if site is None:
            view["error"] = f"no site at {self.config.site_path}"
            return self._publish(view)
        wanted = {g for g, nodes in maintenance.items() if nodes}
        names = [g.name for g in self.config.groups]
        deploy_down = marked_down(site) - self.ours
        if wanted and not [g for g in names if g not in wanted | deploy_down]:
            # never every group: the last one keeps the traffic (as render_site does)
            keep = next(g for g in names if g not in deploy_down) if \
                set(names) - deploy_down else names[0]
            wanted.discard(keep)
            view["error"] = (f"every serving group is in maintenance or switching: {keep} stays "
                             "in the balancer")
        back = set()
        for group in self.ours - wanted:
            if maintenance.get(group) is None:
                continue        # a node did not answer: leave it as it is
            head = next(g for g in self.config.groups if g.name == group)
            if self.healthy(head.health_url, self.config.state_timeout_s):
                back.add(group)
        wanted -= deploy_down       # already out (a deploy's switch): not ours to put back
        new_site = mark(site, wanted, back)
        if new_site != site:
            try:
                answer = self.apply(self.config.site_path,
                                    base64.b64encode(new_site.encode()).decode())
            except (OSError, ValueError) as err:
                view["error"] = f"cannot apply the site: {err}"
                return self._publish(view)
            view["applied_at"] = round(self.clock(), 3)
            view["reloaded"] = bool(answer.get("reloaded"))
            changes = [f"{g} out (maintenance: " + ", ".join(
                f"{n} {s}" for n, s in sorted((maintenance.get(g) or {}).items())) + ")"
                for g in sorted(wanted - self.ours)] + \
                [f"{g} back in" for g in sorted(back)]
            if changes:
                healthstore.append_event(self.config.root, {
                    "event": "gateway", "cluster": self.config.cluster, "t": round(now, 3),
                    "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
                    "reason": "; ".join(changes)})
                log("; ".join(changes))
        self.ours = (self.ours | wanted) - back
        view["out"] = sorted(self.ours)
        return self._publish(view)

    def _publish(self, view: Dict[str, Any]) -> Dict[str, Any]:
        view.setdefault("out", sorted(self.ours))
        with self.lock:
            self.view = view
        healthstore.write_json(self.state_path, view)
        return view

    def snapshot(self) -> Dict[str, Any]:
        with self.lock:
            return dict(self.view)

    def run_forever(self, stop: threading.Event) -> None:
        log(f"watching {len(self.config.groups)} serving group(s) for maintenance: "
            f"{self.config.site_path}")
        repeat(stop, self.config.interval_s, self.step, "gateway")


def _read_text(file: str) -> Optional[str]:
    try:
        with open(file, encoding="utf-8") as handle:
            return handle.read(1_000_000)
    except OSError:
        return None


def log(message: str) -> None:
    say("gateway", message)


def groups_out(view: Optional[Dict[str, Any]]) -> List[str]:
    return [str(g) for g in (view or {}).get("out") or []]
