"""`slo.quality`: the quality gate a release passes before it takes traffic.

Either a prompt set with an expected answer per prompt:

    quality: {prompts: /etc/ascendctl/quality.yaml}

or agreement with the previous release's greedy outputs (the built-in prompt set, or
`prompts`, whose expected answers are then optional and checked too):

    quality: {agree_with_previous: true, min_agreement: 0.9}

The prompt file is read and validated with the inventory, so a broken one is an input
error (`prompts.yaml:LINE: FIELD: message`, exit 2) before any host is contacted; so are
token limits the engine would refuse (check_quality_inventory, once serving is known).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping, Optional

from pydantic import Field, PrivateAttr, field_validator, model_validator

from ascendctl.inventory.model import Section
from ascendctl.inventory.prompts import (
    MAX_TOKENS_LIMIT, PromptSet, builtin_prompt_set, check_token_limits, load_prompt_file,
    prompt_file_path,
)

DEFAULT_MIN_AGREEMENT = 0.9
DEFAULT_MAX_TOKENS = 32
DEFAULT_REQUEST_TIMEOUT_S = 120.0
DEFAULT_CONCURRENCY = 4


class QualitySpec(Section):
    prompts: Optional[str] = None          # a YAML/JSONL prompt set on the jump host
    agree_with_previous: bool = False
    min_agreement: float = Field(default=DEFAULT_MIN_AGREEMENT, gt=0, le=1)
    max_tokens: int = Field(default=DEFAULT_MAX_TOKENS, ge=1, le=MAX_TOKENS_LIMIT)
    request_timeout: float = Field(default=DEFAULT_REQUEST_TIMEOUT_S, gt=0, le=3600)
    concurrency: int = Field(default=DEFAULT_CONCURRENCY, ge=1, le=64)

    _prompt_set: Optional[PromptSet] = PrivateAttr(default=None)

    @field_validator("prompts")
    @classmethod
    def _prompt_path(cls, value: Optional[str]) -> Optional[str]:
        return prompt_file_path(value)

    @model_validator(mode="after")
    def _mode(self) -> "QualitySpec":
        if self.prompts is None and not self.agree_with_previous:
            raise ValueError("give `prompts: FILE` (expected answers) or "
                             "`agree_with_previous: true` (or both)")
        if "min_agreement" in self.model_fields_set and not self.agree_with_previous:
            raise ValueError("min_agreement applies to agree_with_previous: true only")
        if self.prompts is not None:
            if not os.path.isfile(self.prompts):
                raise ValueError(f"prompt set {self.prompts} does not exist on this machine")
            # InputError (not ValueError): the message names the prompt file and its line
            self._prompt_set = load_prompt_file(
                self.prompts, require_expectations=not self.agree_with_previous)
        return self

    @property
    def mode(self) -> str:
        return "agree_with_previous" if self.agree_with_previous else "prompts"

    def prompt_set(self) -> PromptSet:
        """The prompts the gate sends: the validated file, or the built-in set."""
        if self._prompt_set is not None:
            return self._prompt_set

        return builtin_prompt_set()


DEFAULT_GATE = QualitySpec(agree_with_previous=True)
MAX_TOKENS_PATH = ("all", "vars", "slo", "quality", "max_tokens")


def check_quality_inventory(sections: Mapping[str, Any],
                            fail: Callable[[str, tuple[Any, ...]], Exception]) -> None:
    """slo.quality against serving: every prompt's max_tokens (its own, else the set's) must
    leave room for the prompt in serving.max_model_len, or the gate would stop at it after
    a group was switched. FAIL(message, path) names the inventory's line."""
    spec: Optional[QualitySpec] = sections["slo"].quality
    if spec is None:
        return

    def set_limit_error(message: str) -> Any:
        return fail(message, MAX_TOKENS_PATH)

    check_token_limits(spec.prompt_set(), spec.max_tokens, sections["serving"].max_model_len,
                       set_limit_error)
