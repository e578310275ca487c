"""Model weights: manifests, per-node plans (pipeline stages), relayed pushes, verification.

    manifest   size, sha256 and a sampled fingerprint of every file of a model directory
    stages     which pipeline stage each tensor belongs to (vLLM's layer split)
    plan       which files (and tensors) each node needs, with its own index
    repack     rewrite files that mix stages into one file per stage
    push       a content-addressed store on every node, filled by a relay chain
    verify     sizes and fingerprints (fast) or full sha256 of every node's files
"""
