"""What the deploy code calls: make `<release>/model` on every node from its store.

    from ascendctl.weights.release import materialise_release
    results = materialise_release(inv, "/var/lib/ascendctl/releases/R", pool=pool)

Each node's `<release>/model` becomes symlinks into `<deploy.root>/store` plus, for
pipeline layouts, the node's own `model.safetensors.index.json`. Nothing is copied, so
switching or rolling back releases never moves weights. A node whose store lacks a file
fails with the file names (push first). Returns the transport's HostResult per node.
"""

from __future__ import annotations

from ascendctl.weights.plan import WeightsPlan, plan_for_inventory
from ascendctl.weights.remote import materialise_model, node_access


def materialise_release(inv, release_dir: str, *, pool=None, plan: WeightsPlan | None = None,
                        repack: bool = False, hosts: list[str] | None = None) -> dict:
    from ascendctl.transport import SshPool
    from ascendctl.weights.cache import HashCache, default_cache_path

    plan = plan or plan_for_inventory(inv, repack=repack,
                                      cache=HashCache(default_cache_path()))
    dest = release_dir.rstrip("/") + "/model"
    own = pool is None
    pool = pool or SshPool(inv.hosts)
    try:
        return pool.map(lambda conn: materialise_model(
            conn, node_access(inv, inv.host(conn.settings.name)),
            plan.node(conn.settings.name), dest),
            hosts if hosts is not None else [n.name for n in plan.nodes])
    finally:
        if own:
            pool.close()
