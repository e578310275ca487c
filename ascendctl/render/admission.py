"""What the gateway admits (slo.promotion.envelope, docs/promotion.md): at most
`admit_fraction` of the measured envelope of one serving group, times the groups in the
balancer, completions in flight at once. Past that nginx answers at once with
`reject_status` and `Retry-After` (limit_conn on a shared zone): nothing waits in a queue
that would outlast a client's timeout, and the groups stay inside the load at which their
SLOs were measured to hold.

Pure: the inventory, the envelope and the number of groups in the balancer give the limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from ascendctl.inventory import Inventory


@dataclass(frozen=True)
class Admission:
    limit: int              # completions in flight through the gateway at once
    status: int             # 429 | 503, answered past the limit
    retry_after_s: int
    envelope: int           # the measured envelope of one serving group
    fraction: float
    groups: int             # serving groups in the balancer


def admission(inv: Inventory, envelope: Optional[int], groups: int) -> Optional[Admission]:
    """None when the inventory does not ask for it or no envelope is known: the gateway
    then admits everything, as without slo.promotion."""
    spec = inv.slo.promotion
    if spec is None or not spec.envelope.enabled or envelope is None:
        return None
    if envelope < 1 or groups < 1:
        raise ValueError(f"internal: envelope {envelope} over {groups} group(s)")
    e = spec.envelope
    # at least 1: an envelope of 1 admits 1 (refusing everything would be an outage);
    # the epsilon keeps 0.29 × 100 from flooring to 28
    limit = max(1, math.floor(e.admit_fraction * envelope * groups + 1e-9))
    return Admission(limit=limit, status=e.reject_status, retry_after_s=e.retry_after_s,
                     envelope=envelope, fraction=e.admit_fraction, groups=groups)
