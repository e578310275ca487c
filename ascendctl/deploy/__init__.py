"""Deploy, rollback and history: releases on every node, switched in rank order.

    bundle            the node-side runtime shipped in every release
    nodeops           release bookkeeping on a node (runtime/ascendctl_runtime/release_ops.py)
    nodestate         what a node answers, typed
    release           the release a given inventory produces (content-addressed id)
    lock              the cluster-wide deploy lock, held on the head node
    engines           one node's engine units: systemctl, state, journal, readiness probe
    run               one deploy's state (DeployRun), a part of the playbook run's state
    playbook_modules  the steps of playbooks/deploy.yaml and rollback.yaml, one module each
    history           release history across the cluster
"""
