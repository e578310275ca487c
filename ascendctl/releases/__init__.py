"""vllm-ascend releases: the release-set matrix with a source per cell (sets.py,
data/release_sets.yaml) and what each release validates (scope.py). Plain data and its
readers, below everything that plans, renders or runs an engine."""
