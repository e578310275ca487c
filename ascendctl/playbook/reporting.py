"""Reporting a run: live lines per task and host, the recap, JSON and JUnit XML.

On a terminal the console is Rich with colour; piped, the same lines come out plain.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ascendctl.console import get_console
from ascendctl.junit import ERROR, FAILURE, PASSED, SKIPPED, Case, JUnitReport, Suite
from ascendctl.playbook.results import RunReport, TaskHostResult, TaskReport
from ascendctl.playbook.runner import task_selected

if TYPE_CHECKING:
    from ascendctl.playbook.model import Play, Task
    from ascendctl.playbook.results import PlayReport

STYLE = {"ok": "green", "changed": "yellow", "failed": "bold red", "skipped": "cyan",
         "unreachable": "bold magenta"}


class Reporter:
    """Receives the run's events (in the main thread). The base class prints nothing."""

    def play_start(self, play: "Play", report: "PlayReport") -> None: ...

    def task_start(self, task: "Task", report: TaskReport) -> None: ...

    def task_end(self, task: "Task", report: TaskReport) -> None: ...

    def note(self, text: str) -> None: ...

    def run_end(self, report: RunReport) -> None: ...


class ConsoleReporter(Reporter):
    def __init__(self, console: Any = None, *, show_diff: bool = False, check: bool = False,
                 verbose: bool = False):
        if console is None:
            console = get_console()
        self.console = console
        self.show_diff = show_diff
        self.check = check
        self.verbose = verbose

    def _print(self, *parts: Any, **kwargs: Any) -> None:
        self.console.print(*parts, highlight=False, **kwargs)

    def play_start(self, play: "Play", report: "PlayReport") -> None:
        from rich.markup import escape

        hosts = ", ".join(report.hosts) or "-"
        mode = play.order if play.order != "serial" else f"serial {play.serial or 1}"
        if play.rescue:
            mode += ", rescue"
        elif play.always:
            mode += ", always"
        check = " [check mode: nothing is changed]" if self.check else ""
        self._print(f"\n[bold]PLAY \\[{escape(play.name)}][/bold] {escape(hosts)} ({mode})"
                    f"{escape(check)}")

    def task_start(self, task: "Task", report: TaskReport) -> None:
        from rich.markup import escape

        kind = "HANDLER" if report.handler else "TASK"
        once = " (run once)" if task.run_once else ""
        self._print(f"[bold]{kind} \\[{escape(task.name)}][/bold]{once} "
                    f"[dim]{escape(report.file)}:{report.line}[/dim]")

    def task_end(self, task: "Task", report: TaskReport) -> None:
        from rich.markup import escape

        width = max((len(h) for h in report.results), default=0)
        for host, res in report.results.items():
            msg = _one_line(res)
            style = STYLE.get(res.status, "")
            label = "failed*" if res.ignored else res.status
            tries = f" after {res.attempts} attempts" if res.attempts > 1 else ""
            self._print(f"  [{style}]{label:<11}[/{style}] {escape(host):<{width}}  "
                        f"{res.duration:6.2f}s{tries}  {escape(msg)}")
            if (self.show_diff or self.check) and res.diffs and not res.no_log:
                for diff in res.diffs:
                    for line in diff.unified().splitlines():
                        color = "green" if line.startswith("+") and not line.startswith("+++") \
                            else "red" if line.startswith("-") and not line.startswith("---") \
                            else "dim"
                        self._print(f"      [{color}]{escape(line)}[/{color}]")

    def note(self, text: str) -> None:
        from rich.markup import escape

        self._print(f"  [dim]{escape(text)}[/dim]")

    def run_end(self, report: RunReport) -> None:
        from rich.markup import escape

        recap = report.recap()
        title = "RECAP" + (" (check mode: nothing was changed)" if report.check else "")
        self._print(f"\n[bold]{title}[/bold] {report.duration:.2f}s")
        width = max((len(h) for h in recap), default=0)
        for host, counts in recap.items():
            parts = []
            for key in ("ok", "changed", "failed", "skipped", "unreachable", "ignored"):
                value = counts.get(key, 0)
                style = STYLE.get(key, "") if value and key != "ok" else ""
                text = f"{key}={value}"
                parts.append(f"[{style}]{text}[/{style}]" if style else text)
            self._print(f"  {escape(host):<{width}}  " + "  ".join(parts))
        if report.interrupted:
            self._print("[bold red]interrupted[/bold red]: stopped on Ctrl-C; connections "
                        "closed; the results above are what ran")
        if report.aborted:
            self._print(f"[bold red]stopped[/bold red]: {escape(report.aborted)}")


def _one_line(res: TaskHostResult) -> str:
    if res.no_log:
        return "(output hidden: no_log)"
    msg = res.msg or ""
    if not msg and res.status == "failed" and res.data.get("stderr"):
        msg = str(res.data["stderr"]).splitlines()[-1]
    msg = " ".join(msg.split())
    return msg if len(msg) <= 200 else msg[:199] + "…"


def list_tasks(planned: list[tuple["Play", tuple[Any, ...]]], options: Any, console: Any) -> None:
    """`--list-tasks`: what would run, on which hosts, with tags; nothing is contacted."""
    from rich.markup import escape

    for play, hosts in planned:
        names = ", ".join(h.name for h in hosts) or "(no hosts)"
        kind = ", rescue: only after a failure" if play.rescue else \
            ", always: whatever happened" if play.always else ""
        console.print(f"[bold]PLAY \\[{escape(play.name)}][/bold] {escape(names)} "
                      f"({play.order}{kind})", highlight=False)
        for task in play.tasks:
            if not task_selected(task, play, options):
                continue
            tags = sorted(task.tags | play.tags)
            suffix = f"  tags: {', '.join(tags)}" if tags else ""
            once = " (run once)" if task.run_once else ""
            console.print(f"  {escape(task.name)}{once}  [dim]{task.module}{escape(suffix)}[/dim]",
                          highlight=False)
        for handler in play.handlers:
            console.print(f"  handler: {escape(handler.name)}  [dim]{handler.module}[/dim]",
                          highlight=False)


def junit_report(report: RunReport) -> JUnitReport:
    """One testcase per task and host; failed -> failure, unreachable -> error."""
    stem = Path(report.playbook).stem
    suites = []
    for play in report.plays:
        cases = []
        for task in play.tasks:
            for host, res in task.results.items():
                prefix = "handler: " if task.handler else ""
                case = partial(Case, f"{stem}.{play.name}", f"{prefix}{task.name} [{host}]",
                               seconds=res.duration,
                               attributes=(("file", task.file), ("line", str(task.line or 0))))
                message = _one_line(res)
                if res.status == "failed" and not res.ignored:
                    cases.append(case(FAILURE, message, "failed", _details(res)))
                elif res.status == "unreachable":
                    cases.append(case(ERROR, message, res.error_kind or "unreachable", message))
                elif res.status == "skipped":
                    cases.append(case(SKIPPED, message))
                else:
                    cases.append(case(PASSED, text=f"{res.status}: {message}"
                                      if res.msg and not res.no_log else None))
        suites.append(Suite(play.name, cases))
    return JUnitReport(f"ascendctl play {Path(report.playbook).name}", report.duration, suites)


def _details(res: TaskHostResult) -> str:
    if res.no_log:
        return "(output hidden: no_log)"
    lines = [res.msg]
    for key in ("rc", "stdout", "stderr"):
        if res.data.get(key) not in (None, ""):
            value = str(res.data[key])
            lines.append(f"{key}: {value[-2000:]}")
    return "\n".join(line for line in lines if line)

