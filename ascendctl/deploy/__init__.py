"""Deploy, rollback and history: releases on every node, switched in rank order.

    bundle     the node-side runtime shipped in every release
    nodeops    release bookkeeping on a node (runtime/ascendctl_runtime/release_ops.py)
    release    the release a given inventory produces (content-addressed id)
    lock       the cluster-wide deploy lock, held on the head node
    switch     stop the old engine, start the new one rank by rank, gate on readiness,
               roll every node back if anything fails
    context    one deploy's state shared by the playbook modules
"""
