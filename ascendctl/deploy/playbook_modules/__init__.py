"""The deploy and rollback steps as playbook modules (playbooks/deploy.yaml, rollback.yaml
and the switch.yaml both import).

Each step is one module in one small file; they share the run's DeployRun
(`DeployRun.of(ctx)`, ascendctl/deploy/run.py), never a global:

    lock      deploy_lock          take / give back the cluster-wide lock (head)
    stage     release_facts        read every node's releases, units, history, lock
              release_stage        write the release directory (atomically)
              weights_push         weights into every node's store (relayed, resumable)
              release_model        `<release>/model` links into the store
    engine    engine_present       the release's engine on every node: archive relayed and
                                   loaded / image checked / venv built, where missing
    switch    engine_stop          decide whether the play's hosts restart; stop their
                                   engines, followers first
              release_units        install the release's unit files
              engine_start         start this host's engine units and wait until up
              engine_ready         readiness gate: /v1/models + a completion; ranks stay up
              engine_warmup        a streamed completion through the API key
              node_services        exporter and watchdog
    commit    release_commit       `current` → the release, units enabled, history
              release_prune        old releases beyond deploy.keep_releases, then the
                                   images / venvs no kept release uses
    health    supervisor_hold      hold the gang supervisor while engines switch; give it back
    restore   release_restore      (rescue) every touched node back on the previous release
    proxy     proxy_site           the gateway's nginx site over every group's head
              balancer             a group out of the balancer (drained) / back in
    quality   quality_baseline     the serving release's answers recorded where missing
              quality_gate         the quality gate on each restarted group's head
              bench_gate           a short bench against the SLOs (deploy.rolling.bench)
    promotion promotion_gate       slo.promotion's gates on each restarted group's head

Every switch step acts on the hosts of its play (`ctx.play_hosts`), per serving group, so
the same steps run once per batch of groups inside the deploy's `rolling:` block.
"""

from ascendctl.deploy.playbook_modules import (  # noqa: F401  (registers the modules)
    balancer, bench_gate, commit, engine, lock, promotion, quality, restore, stage,
    supervisor, switch,
)
