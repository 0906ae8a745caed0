"""Pod address ranges that a network plugin's own IPAM gives each node, for the pools' client maps.

With Calico's IPAM (BlockAffinity objects) or Cilium's cluster-pool IPAM
(CiliumNode objects) pods take addresses outside their Node's spec.podCIDR,
so without these ranges every in-cluster reader would be 'unknown' to the
exporters and load the cache switch's uplink out in the drift check.

Listed by the pool reconcile at most every READ_SECONDS, not kept in kopf
indexes as the nodes are. In kopf 1.45.2 (kopf/_core/reactor/), an index on
a resource whose CRD is absent (most sites) is skipped: no watcher, no
readiness toggle (orchestration.py:274-278), so handlers would not wait;
but kopf warns "Unresolved resources cannot be served" at start and at
every CRD change in the cluster (observation.py:314). And an index on a
resource whose CRD is installed but that the operator may not list
(rbac.create=false with a ClusterRole from before this) holds every handler
forever: the list's 403 is retried for about a minute, then raised (_cogs/clients/api.py:99-122),
the watcher dies before its first list is done, which alone drops the
index's readiness toggle (queueing.py:187-189), handlers wait for every
toggle (processing.py:112), and a dead watcher is not started again
(orchestration.py:274). Here a 404 is "no such plugin", and a refusal only
leaves that plugin's pods 'unknown'.
"""

from __future__ import annotations

import time

from ..apply import ApiError
from ..topology import calico_block_networks, cilium_node_networks, pod_networks_by_node
from .client import kube
from .memory import PoolMemory

READ_SECONDS = 120.0   # a new block or CIDR (a node's pods outgrowing theirs) reaches the map within this
SOURCES = {"BlockAffinity": calico_block_networks, "CiliumNode": cilium_node_networks}


def read_pod_networks(kept: PoolMemory, logger) -> dict[str, tuple[str, ...]]:
    """node -> the pod ranges the plugins' IPAM gave it ({} where neither plugin's CRD is installed), listed
    again once READ_SECONDS have passed since the pool's last list."""
    at, listed = kept.pod_networks or (None, {})
    if at is None or time.monotonic() - at >= READ_SECONDS:
        listed = {kind: _listed(kind, parse, listed.get(kind, ((), None)), logger) for kind, parse in SOURCES.items()}
        kept.pod_networks = (time.monotonic(), listed)
    return pod_networks_by_node(item for items, _ in listed.values() for item in items)


def _listed(kind: str, parse, last: tuple[tuple, int | None], logger) -> tuple[tuple, int | None]:
    """What `parse` makes of each object of `kind`, and the status of a failed list (else None): nothing when
    the CRD is not installed (404); what the last list found when the list fails otherwise (a 403: the
    ClusterRole lacks the grant; with no grant the API server says 403 whether the CRD is installed or not, so
    it is warned about once per pool and status, not at every list)."""
    try:
        return tuple(kube().list(kind, keep=parse)), None
    except ApiError as exc:
        if exc.status == 404:
            return (), None
        if exc.status != last[1]:
            logger.warning(f"{kind} objects not listed ({exc}): if that network plugin gives pods their addresses, "
                           "they stay 'unknown' to the cache exporters")
        return last[0], exc.status
