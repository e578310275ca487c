"""What the deploy and rollback steps hand each other through the run (DeployRun), by name.

Each step module declares the names it needs and provides (`Module.needs` / `provides`);
a playbook whose order breaks them is refused when it is loaded (ascendctl/playbook/order.py).

    deploy_lock       the cluster-wide lock is held                     deploy_lock acquired
    node_states       every node's releases, units, history, lock       release_facts
    release_on_nodes  the release to switch to is on every node         release_stage; release_facts
                                                                        naming a release (rollback)
    weights           the weights are in every node's store             weights_push
    restart_decided   which hosts restart; their old engines stopped    engine_stop
    units_installed   the release's unit files installed                release_units
    engines_started   each restarted rank started and up                engine_start
    engines_ready     the API answers, every rank stayed up             engine_ready
    committed         `current` points at the release                   release_commit
"""

DEPLOY_LOCK = "deploy_lock"
NODE_STATES = "node_states"
RELEASE_ON_NODES = "release_on_nodes"
WEIGHTS = "weights"
RESTART_DECIDED = "restart_decided"
UNITS_INSTALLED = "units_installed"
ENGINES_STARTED = "engines_started"
ENGINES_READY = "engines_ready"
COMMITTED = "committed"
