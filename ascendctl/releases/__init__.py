"""The vllm-ascend release matrix: which vLLM, CANN, torch_npu, HDK and Python go together
(matrix.py, data/release_sets.yaml), and what an inventory's pinned release means for the
planner, the renderer and the preflight (scope.py). Data and pure functions only: the
engine, the planner and the checks read it."""
