"""ascendctl: from a rack of Ascend 910B servers to a healthy vLLM-Ascend endpoint."""

__version__ = "0.1.0"
