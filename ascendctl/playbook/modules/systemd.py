"""systemd: daemon-reload, enable/disable, start/stop/restart/reload, in one execution,
reporting the unit's real state afterwards (ActiveState, SubState, UnitFileState, ...)."""

from __future__ import annotations

import base64
import re
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, field_validator

from ascendctl.playbook.modules.base import (
    Module, ModuleContext, ModuleResult, register_module,
)
from ascendctl.transport.files import parse_fields

UNIT_RE = re.compile(r"^[A-Za-z0-9:_.@\\-]+$")
SHOW_PROPS = ("LoadState", "ActiveState", "SubState", "UnitFileState", "MainPID", "Result",
              "NeedDaemonReload")

SYSTEMD_SCRIPT = r"""
unit=$1 state=$2 enabled=$3 reload=$4 check=$5
changed=0
act() { if [ "$check" = 0 ]; then systemctl "$@" || { echo "error=systemctl $* failed"; finish 3; }; fi; }
show() { systemctl show --property="$1" --value -- "$unit" 2>/dev/null; }
finish() {
  for prop in LoadState ActiveState SubState UnitFileState MainPID Result NeedDaemonReload; do
    echo "unit_$prop=$(show "$prop")"
  done
  echo "changed=$changed"
  if [ "$(show ActiveState)" = failed ] || [ "${1:-0}" != 0 ]; then
    printf 'journal_b64='
    journalctl -u "$unit" -n 15 --no-pager -o cat 2>/dev/null | tail -c 4000 | base64 -w0
    echo
  fi
  exit "${1:-0}"
}
if [ "$reload" = 1 ]; then
  if [ "$(show NeedDaemonReload)" = yes ]; then changed=1; fi
  act daemon-reload
fi
load=$(show LoadState)
if [ "$load" = not-found ] || [ -z "$load" ]; then
  if [ "$check" = 1 ]; then echo "missing=1"; changed=1; finish 0; fi
  echo "error=unit $unit not found"; finish 4
fi
if [ "$load" = masked ] && { [ -n "$state" ] && [ "$state" != stopped ] || [ "$enabled" = yes ]; }; then
  echo "error=unit $unit is masked"; finish 4
fi
cur_enabled=$(systemctl is-enabled -- "$unit" 2>/dev/null)
case $enabled in
  yes) case $cur_enabled in
         enabled|enabled-runtime|static|alias|indirect|generated|transient) ;;
         *) changed=1; act enable -- "$unit" ;;
       esac ;;
  no) case $cur_enabled in
        enabled|enabled-runtime) changed=1; act disable -- "$unit" ;;
      esac ;;
esac
cur_active=$(systemctl is-active -- "$unit" 2>/dev/null)
case $state in
  started) if [ "$cur_active" != active ] && [ "$cur_active" != reloading ]; then
             changed=1; act start -- "$unit"; fi ;;
  stopped) case $cur_active in
             active|activating|reloading|deactivating) changed=1; act stop -- "$unit" ;;
           esac ;;
  restarted) changed=1; act restart -- "$unit" ;;
  reloaded) changed=1; act reload-or-restart -- "$unit" ;;
esac
finish 0
"""


@register_module("systemd")
class SystemdModule(Module):
    """Manage a systemd unit and report its real state.

    `daemon_reload: true` reloads unit files (reported as a change only when systemd
    says a reload was needed). `state: started` fails if the unit does not end up active.
    """

    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")
        name: str
        state: Optional[Literal["started", "stopped", "restarted", "reloaded"]] = None
        enabled: Optional[bool] = None
        daemon_reload: bool = False

        @field_validator("name")
        @classmethod
        def _unit(cls, value: str) -> str:
            if not UNIT_RE.fullmatch(value) or value.startswith("-"):
                raise ValueError(f"{value!r} is not a unit name")
            return value

    def run(self, ctx: ModuleContext, args: Any) -> ModuleResult:
        enabled = "" if args.enabled is None else ("yes" if args.enabled else "no")
        res = ctx.run_shell(SYSTEMD_SCRIPT, [args.name, args.state or "", enabled,
                                             "1" if args.daemon_reload else "0",
                                             "1" if ctx.check else "0"])
        fields = parse_fields(res.stdout)
        status = {p: fields.get(f"unit_{p}", "") for p in SHOW_PROPS}
        journal = ""
        if fields.get("journal_b64"):
            journal = base64.b64decode(fields["journal_b64"]).decode("utf-8", "replace").strip()
        data = {"name": args.name, "status": status, "state": status["ActiveState"],
                "enabled": status["UnitFileState"]}
        if journal:
            data["journal"] = journal
        if "error" in fields:
            msg = fields["error"] + (f"; journal: {journal.splitlines()[-1]}" if journal else "")
            return ModuleResult(failed=True, msg=msg, data=data)
        if "changed" not in fields:
            result = ModuleResult.from_command(res, changed=False)
            result.data.update(data)
            return result
        changed = fields["changed"] == "1"
        active, sub = status["ActiveState"], status["SubState"]
        if fields.get("missing") == "1":
            return ModuleResult(changed=True, data=data,
                                msg=f"unit {args.name} does not exist yet (would be created "
                                "by an earlier task)")
        if not ctx.check and args.state in ("started", "restarted", "reloaded") and \
                active not in ("active", "activating", "reloading"):
            tail = f"; journal: {journal.splitlines()[-1]}" if journal else ""
            return ModuleResult(failed=True, changed=changed, data=data,
                                msg=f"{args.name} is {active}/{sub} (result "
                                f"{status['Result']}){tail}")
        if not ctx.check and args.state == "stopped" and active in ("active", "reloading"):
            return ModuleResult(failed=True, changed=changed, data=data,
                                msg=f"{args.name} is still {active}")
        return ModuleResult(changed=changed, data=data, msg=f"{active}/{sub}, "
                            f"{status['UnitFileState'] or 'no unit file state'}")
