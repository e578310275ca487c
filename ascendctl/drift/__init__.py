"""The option-drift guard: an inventory's vLLM options, additional_config keys and engine
environment checked against what its pinned vllm-ascend release accepts."""

from ascendctl.drift.inventory import option_findings, option_warnings, refuse_option_drift

__all__ = ["option_findings", "option_warnings", "refuse_option_drift"]
