"""command (argv, no shell), shell (a script with quoted values), ping."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, field_validator

from ascendctl.playbook.modules.base import (
    Module, ModuleContext, ModuleError, ModuleResult, register_module,
)
from ascendctl.playbook.templating import Templar, split_command
from ascendctl.transport import quoting


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _env(value: Optional[dict[str, Any]]) -> Optional[dict[str, str]]:
    if value is None:
        return None
    out = {}
    for key, val in value.items():
        if not quoting.ENV_NAME_RE.fullmatch(str(key)):
            raise ValueError(f"{key!r} is not an environment variable name")
        out[str(key)] = val if isinstance(val, str) else str(val)
    return out


def _words(value: Any) -> Any:
    """A YAML list's scalars as strings (`[sleep, 5]` -> `["sleep", "5"]`)."""
    if isinstance(value, list):
        return [v if isinstance(v, str) else str(v) for v in value]
    return value


# `env:` of a command or script: variable names checked, values as strings
Environment = Annotated[Optional[dict[str, Any]], AfterValidator(_env)]


@register_module("command")
class Command(Module):
    """Run a program with arguments; no shell is involved, so nothing is interpreted.

    `command: [systemctl, is-active, "{{ unit }}"]` or `command: "systemctl is-active
    {{ unit }}"` (split into words before rendering: a value stays one argument).
    Reports `changed` unless `changed_when` says otherwise; skipped under --check unless
    `check_mode: false`.
    """

    free_form = "argv"
    supports_check = False

    class Args(_Args):
        argv: list[str]
        chdir: Optional[str] = None
        stdin: Optional[str] = None
        env: Environment = None

        @field_validator("argv", mode="before")
        @classmethod
        def _split(cls, value: Any) -> Any:
            return split_command(value) if isinstance(value, str) else _words(value)

        @field_validator("argv")
        @classmethod
        def _non_empty(cls, value: list[str]) -> list[str]:
            if not value:
                raise ValueError("empty command")
            return value

    @classmethod
    def normalize(cls, value: Any) -> Any:
        if isinstance(value, str):
            # Split now so each word is rendered on its own at run time.
            return {"argv": split_command(value)}
        if isinstance(value, list):
            return {"argv": value}
        return super().normalize(value)

    def run(self, ctx: ModuleContext, args: Any) -> ModuleResult:
        argv = quoting.with_env(args.env, args.argv)
        if args.chdir:
            command = f"cd -- {quoting.quote(args.chdir)} && exec {quoting.join_argv(argv)}"
            res = ctx.run_shell(command, stdin=args.stdin)
        else:
            res = ctx.run(argv, stdin=args.stdin)
        return ModuleResult.from_command(res, changed=True)


@register_module("shell")
class Shell(Module):
    """Run a shell script. Values go in as positional parameters (`args:` → "$1", "$2"),
    or through `{{ value | quote }}`; an unquoted `{{ }}` in the script is refused when the
    playbook is loaded, so an inventory value can never become shell syntax."""

    free_form = "cmd"
    supports_check = False

    class Args(_Args):
        cmd: str
        args: Annotated[list[str], BeforeValidator(_words)] = []
        executable: Literal["sh", "bash"] = "sh"
        chdir: Optional[str] = None
        stdin: Optional[str] = None
        env: Environment = None

    @staticmethod
    def check_at_load(args: dict[str, Any], templar: Templar) -> None:
        cmd = args.get("cmd")
        if isinstance(cmd, str):
            bad = templar.unquoted_outputs(cmd)
            if bad:
                raise ModuleError(
                    f"shell: {bad[0]!r} puts a value into the script unquoted; pass it as "
                    "`args:` (\"$1\") or write {{ value | quote }}", field="cmd")

    def run(self, ctx: ModuleContext, args: Any) -> ModuleResult:
        script = args.cmd
        if args.chdir:
            script = f"cd -- {quoting.quote(args.chdir)} || exit 1\n{script}"
        command = quoting.sh_c(script, args.args, shell=args.executable)
        if args.env:
            command = quoting.join_argv(quoting.with_env(args.env, [])) + " " + command
        conn = ctx.conn
        conn.open()
        res = conn.exec(conn.become_command(command, ctx.become), stdin=args.stdin,
                        timeout=ctx.timeout)
        return ModuleResult.from_command(res, changed=True)


@register_module("ping")
class Ping(Module):
    """Check that the host answers over SSH (one execution of `true`)."""

    class Args(_Args):
        pass

    def run(self, ctx: ModuleContext, args: Any) -> ModuleResult:
        res = ctx.run(["true"])
        return ModuleResult(failed=not res.ok, msg="pong" if res.ok else "no answer",
                            data={"ping": "pong" if res.ok else ""})
