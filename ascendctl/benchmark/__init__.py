"""`ascendctl bench`: vLLM's own `vllm bench serve` run on the head node against the
serving release, its figures judged by the inventory's SLOs and stored with the release."""
