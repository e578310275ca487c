"""The option-drift guard: what a vllm-ascend release's engine would refuse at start-up
(fatal findings) or silently ignore (warnings), for the options an inventory passes.

- `vllm serve` options: an option string the release's vLLM does not know (also an
  ambiguous prefix, an item holding a space) makes argparse exit with a usage error.
- `--additional-config` keys: vllm-ascend ≥ 0.27.1rc1 validates the mapping as a
  pydantic dataclass with extra="forbid" (a key it does not know is refused at start-up);
  earlier releases read the keys they know with `.get` and ignore the rest.
- environment variables: nothing refuses one, except vLLM with
  `--fail-on-environ-validation`, which raises for any `VLLM_*` variable outside its
  own list (vllm/envs.py `validate_environ`); otherwise an unknown `VLLM_*` variable is
  only logged ("Unknown vLLM environment variable detected") and ignored. Variables of
  other components (HCCL_*, ASCEND_*, ...) are judged only by the release notes.
"""

from __future__ import annotations

import difflib
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ascendctl.drift.argv import Option, additional_configs, read_options
from ascendctl.drift.schema import History, OptionSchema, ReleaseOptions, Removal
from ascendctl.inventory.excerpt import excerpt

FAIL_ON_ENVIRON = "--fail-on-environ-validation"
# "did you mean" costs a fuzzy match over every option: only for the first few findings
SUGGESTIONS_MAX = 20
Where = Hashable


@dataclass(frozen=True)
class Finding:
    fatal: bool
    message: str
    where: Where
    option: str = ""        # "flag:--x", "additional_config:key", "env:NAME"


@dataclass(frozen=True)
class Argv:
    """One command line and where each of its items comes from (None: ascendctl's own)."""

    items: Sequence[str]
    origins: Sequence[Where]


def check_options(schema: OptionSchema, release: str, *, argvs: Iterable[Argv] = (),
                  env: Iterable[tuple[str, Where, str | None]] = (),
                  additional_config: Iterable[tuple[Mapping[str, Any], Where]] = ()
                  ) -> list[Finding]:
    """Findings for one release, fatal ones first, each option reported once."""
    options = schema.options(release)
    checker = _Checker(schema, options)
    configs = list(additional_config)
    strict_env = False
    for argv in argvs:
        for option in read_options(argv.items, options):
            checker.flag(option, argv.origins[option.index])
            strict_env = strict_env or option.resolved == FAIL_ON_ENVIRON
        configs += [(mapping, argv.origins[index])
                    for index, mapping in additional_configs(argv.items, options)]
    for mapping, where in configs:
        checker.additional_config(mapping, where)
    for name, where, set_by in env:
        checker.env(name, where, strict=strict_env, set_by=set_by)
    return sorted(checker.findings, key=lambda f: not f.fatal)


class _Checker:
    def __init__(self, schema: OptionSchema, options: ReleaseOptions):
        self.schema = schema
        self.options = options
        self.findings: list[Finding] = []
        self.seen: set[tuple[str, str]] = set()
        self.engine = f"vllm-ascend {options.release} (vLLM {options.vllm})"
        self.suggestions = SUGGESTIONS_MAX

    def add(self, key: tuple[str, str], fatal: bool, message: str, where: Where) -> None:
        if key not in self.seen:
            self.seen.add(key)
            self.findings.append(Finding(fatal, message, where, f"{key[0]}:{key[1]}"))

    # -- vllm serve options --------------------------------------------------------------

    def flag(self, option: Option, where: Where) -> None:
        if option.resolved is not None:
            if option.resolved in self.options.deprecated_flags:
                self.add(("flag", option.resolved), False,
                         f"{option.resolved} is deprecated in vLLM {self.options.vllm} (it "
                         "still works, with a warning at start-up)", where)
            return
        shown = option.written
        if option.problem == "space":
            self.add(("flag", shown), True,
                     f"{excerpt(shown)} is one argv item holding a space: vllm serve takes "
                     "it for a positional and exits ('unrecognized arguments'); give the "
                     "option and its value as separate items", where)
            return
        if option.problem and option.problem.startswith("ambiguous"):
            self.add(("flag", shown), True,
                     f"{excerpt(shown)} is {option.problem} in vLLM {self.options.vllm} "
                     f"({self.engine}): vllm serve exits with a usage error at start-up; "
                     "write the option in full", where)
            return
        name = "--" + shown.lstrip("-").partition("=")[0].partition(".")[0].replace("_", "-") \
            if shown.startswith("--") else shown.partition("=")[0]
        self.add(("flag", name), True, self._unknown_flag(name, shown), where)

    def _unknown_flag(self, name: str, shown: str) -> str:
        vllm = self.options.vllm
        message = (f"{excerpt(shown)}: no option of vLLM {vllm}, the vLLM of vllm-ascend "
                   f"{self.options.release}; vllm serve exits with a usage error at start-up")
        removal = self.schema.removal("flag", name, self.options.release)
        history = self.schema.history("flag", name, vllm)
        if history.last_before is not None:
            message += (f": removed in vLLM {history.removed_in} (the last with it: "
                        f"{history.last_before})")
        elif history.next_after is not None:
            releases = self.schema.releases_with_vllm(history.next_after)
            paired = f", vllm-ascend {releases[0]}" if releases else ""
            message += (f": it is new in vLLM {history.next_after}{paired}; pin that release "
                        "to use it")
        if removal is not None:
            message += f"; {removal.note}: {excerpt(removal.text, 120)}"
        if removal is not None or history.last_before is not None:
            message += self._replacement(removal)
        elif history.next_after is None:
            message += self._suggestion(name, (f for f in self.options.flags
                                               if f.startswith("--") == name.startswith("--")))
        return message

    # -- additional_config ---------------------------------------------------------------

    def additional_config(self, mapping: Mapping[str, Any], where: Where) -> None:
        for key, value in mapping.items():
            key = str(key)
            removal = self.schema.removal("additional_config", key, self.options.release)
            if key in self.options.config_keys:
                if removal is not None and removal.still_read:
                    self.add(("additional_config", key), False,
                             f"additional_config key {key}: {self._still_read(removal)}",
                             where)
                if isinstance(value, Mapping) and self.options.unknown_config_refused:
                    self._nested(key, value, where)
                continue
            self.add(("additional_config", key), self.options.unknown_config_refused,
                     self._unknown_key(key, removal), where)

    def _nested(self, key: str, mapping: Mapping[str, Any], where: Where) -> None:
        known = {n.partition(".")[2] for n in self.options.config_nested
                 if n.startswith(key + ".")}
        if not known:
            return   # not a validated sub-config
        for child in map(str, mapping):
            name = f"{key}.{child}"
            removal = self.schema.removal("additional_config", name, self.options.release)
            if child in known:
                if removal is not None and removal.still_read:
                    self.add(("additional_config", name), False,
                             f"additional_config key {name}: {self._still_read(removal)}",
                             where)
                continue
            message = (f"additional_config key {key}.{excerpt(child)}: {self.engine} "
                       f"refuses keys its {key} does not know at start-up (pydantic "
                       f"extra=\"forbid\", {self.options.unknown_config_source})")
            if removal is not None:
                message += f"; {removal.note}: {excerpt(removal.text, 120)}" \
                    + self._replacement(removal)
            self.add(("additional_config", name), True, message, where)

    def _unknown_key(self, key: str, removal: Removal | None) -> str:
        shown = excerpt(key)
        if self.options.unknown_config_refused:
            what = (f"{self.engine} refuses additional_config keys it does not know at "
                    f"start-up (pydantic extra=\"forbid\", {self.options.unknown_config_source}"
                    "; unless vllm-omni is installed)")
        else:
            what = (f"{self.engine} does not read it and ignores it silently (AscendConfig "
                    f"reads the keys it knows, {self.options.unknown_config_source})")
        message = f"additional_config key {shown}: {what}"
        history = self.schema.history("additional_config", key, self.options.release)
        message += _history_text(history, "vllm-ascend", "to read it")
        if removal is not None:
            message += f"; {removal.note}: {excerpt(removal.text, 120)}"
        if removal is not None or history.last_before is not None:
            message += self._replacement(removal)
        elif history.next_after is None:
            message += self._suggestion(key, self.options.config_keys)
        return message

    # -- environment ---------------------------------------------------------------------

    def env(self, name: str, where: Where, *, strict: bool, set_by: str | None = None) -> None:
        """`set_by`: what sets the variable when the inventory does not name it."""
        options = self.options
        removal = self.schema.removal("env", name, options.release)
        read = name in options.vllm_env or name in options.ascend_env
        if name.startswith("VLLM_") and name not in options.vllm_env and strict:
            self.add(("env", name), True,
                     f"{name}: vLLM {options.vllm} is started with {FAIL_ON_ENVIRON} and "
                     "raises 'Unknown vLLM environment variable detected' for every VLLM_* "
                     "variable outside vllm/envs.py"
                     + (" (vllm-ascend reads this one, vLLM does not list it)" if read else ""),
                     where)
            return
        if read:
            if removal is not None and removal.still_read:
                self.add(("env", name), False, f"{name}: {self._still_read(removal)}", where)
            return
        if not name.startswith("VLLM_"):
            # read by CANN, HCCL, torch_npu, the KV pool ...: only the notes can tell
            if removal is not None:
                self.add(("env", name), False,
                         f"{name}: the {removal.note} say {excerpt(removal.text, 120)} "
                         f"(neither vLLM {options.vllm} nor vllm-ascend {options.release} "
                         "reads it)" + self._replacement(removal), where)
            return
        subject = f"{name} (set by ascendctl from {set_by})" if set_by else name
        message = (f"{subject} is read by neither vLLM {options.vllm} nor vllm-ascend "
                   f"{options.release}: it is ignored (vLLM logs 'Unknown vLLM environment "
                   "variable detected')")
        ascend = self.schema.history("env", name, options.release)
        vllm = self.schema.vllm_env_history(name, options.vllm)
        if ascend.last_before is not None:
            message += _history_text(ascend, "vllm-ascend", "to read it")
        else:
            message += _history_text(vllm, "vLLM", "to read it")
        if removal is not None:
            message += f"; {removal.note}: {excerpt(removal.text, 120)}"
        if removal is not None or ascend.last_before or vllm.last_before:
            message += self._replacement(removal)
        elif not (ascend.next_after or vllm.next_after):
            message += self._suggestion(name, options.vllm_env | options.ascend_env)
        self.add(("env", name), False, message, where)

    def _suggestion(self, name: str, candidates: Iterable[str]) -> str:
        if self.suggestions <= 0:
            return ""
        self.suggestions -= 1
        close = difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=0.75)
        return f"; did you mean {close[0]}?" if close else ""

    def _still_read(self, removal: Removal) -> str:
        return (f"the {removal.note} announce its removal or deprecation "
                f"({excerpt(removal.text, 120)}), but {self.engine} still reads it: it works "
                "in this release, expect it gone in a later one" + self._replacement(removal))

    @staticmethod
    def _replacement(removal: Removal | None) -> str:
        if removal is not None and removal.replacement:
            return f"; replacement: {removal.replacement}"
        return "; the vllm-ascend release notes name no replacement"


def _history_text(history: History, package: str, verb: str) -> str:
    text = ""
    if history.last_before is not None:
        text += (f"; removed in {package} {history.removed_in} (the last {verb}: "
                 f"{history.last_before})")
    if history.next_after is not None:
        text += f"; {package} {history.next_after} reads it" if history.last_before \
            else f"; it is new in {package} {history.next_after}"
    return text

