"""Floors of the numbers the planner is given."""

from __future__ import annotations

# The smallest capacity or demand (uplink, WAN, NIC, a cache host's serving, a worker's reads) the schema
# admits, in Gbps: 1 Mbps. Below it a link or a reader moves nothing an analysis notices, and the planner
# divides by capacities (a link's utilisation is its load over its capacity): an uplink of 5e-324 Gbps made
# coefficients beyond a float's range, and HiGHS returned a plan with none of a fleet's workers in it, or
# did not return at all. At 0.001 the largest coefficient stays within 1e6 of the smallest, which its
# tolerances handle.
MIN_GBPS = 0.001
# The fastest NIC the schema admits, in Gbps (a node's annotation beyond it is no NIC speed).
MAX_NIC_GBPS = 1600
