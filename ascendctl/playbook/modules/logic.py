"""Controller-side modules: assert, fail, debug, set_fact. They never open a connection.

With `run_once: true` a controller module runs once and sees every host's variables
through `hostvars` (and `play_hosts`): the tool for cross-node checks such as "every
node reports the same MTU".
"""

from __future__ import annotations

import json
import re
from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from ascendctl.playbook.modules.base import (
    Module, ModuleContext, ModuleError, ModuleResult, register_module,
)
from ascendctl.playbook.templating import Templar, TemplateError

IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@register_module("assert")
class Assert(Module):
    """Fail unless every expression in `that` is true (expressions, not {{ templates }})."""

    runs_on = "controller"
    free_form = "that"

    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")
        that: Union[str, bool, list[Union[str, bool]]]
        fail_msg: Optional[str] = None
        msg: Optional[str] = None
        success_msg: Optional[str] = None

        @field_validator("that")
        @classmethod
        def _list(cls, value: Any) -> list[Any]:
            return value if isinstance(value, list) else [value]

    @staticmethod
    def check_at_load(args: dict[str, Any], templar: Templar) -> None:
        that = args.get("that")
        for item in that if isinstance(that, list) else [that]:
            if isinstance(item, str):
                templar.check_expression(item)

    def run(self, ctx: ModuleContext, args: Any) -> ModuleResult:
        for expression in args.that:
            try:
                ok = ctx.templar.truth(expression, ctx.vars)
            except TemplateError as err:
                raise ModuleError(f"assert: {err}") from None
            if not ok:
                message = args.fail_msg or args.msg or f"assertion failed: {expression}"
                return ModuleResult(failed=True, msg=message,
                                    data={"assertion": str(expression)})
        return ModuleResult(msg=args.success_msg or "all assertions passed")


@register_module("fail")
class Fail(Module):
    """Fail with a message (use with `when`)."""

    runs_on = "controller"
    free_form = "msg"

    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")
        msg: str = "failed as requested"

    def run(self, ctx: ModuleContext, args: Any) -> ModuleResult:
        return ModuleResult(failed=True, msg=args.msg)


@register_module("debug")
class Debug(Module):
    """Show a message, or the value of a variable (`var: name`)."""

    runs_on = "controller"
    free_form = "msg"

    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")
        msg: Optional[Any] = None
        var: Optional[str] = None

        @model_validator(mode="after")
        def _one(self) -> "Debug.Args":
            if self.msg is not None and self.var is not None:
                raise ValueError("give `msg` or `var`, not both")
            return self

    def run(self, ctx: ModuleContext, args: Any) -> ModuleResult:
        if args.var is not None:
            value = ctx.templar.expr(args.var, ctx.vars)
            text = json.dumps(value, default=str) if not isinstance(value, str) else value
            return ModuleResult(msg=f"{args.var} = {text}", data={args.var: value}
                                if IDENT_RE.fullmatch(args.var) else {"value": value})
        msg = args.msg if args.msg is not None else "hello"
        return ModuleResult(msg=msg if isinstance(msg, str) else json.dumps(msg, default=str))


@register_module("set_fact")
class SetFact(Module):
    """Set variables on the host for the rest of the run (values may be templates)."""

    runs_on = "controller"

    class Args(BaseModel):
        model_config = ConfigDict(extra="allow")

        @model_validator(mode="after")
        def _names(self) -> "SetFact.Args":
            for key in (self.model_extra or {}):
                if not IDENT_RE.fullmatch(key):
                    raise ValueError(f"{key!r} is not a valid variable name")
            if not self.model_extra:
                raise ValueError("set_fact needs at least one name: value")
            return self

    def run(self, ctx: ModuleContext, args: Any) -> ModuleResult:
        facts = dict(args.model_extra or {})
        return ModuleResult(facts=facts, data={"facts": facts},
                            msg=", ".join(sorted(facts)))
