"""Rendezvous hashing: which cache host serves a file, for ring (`hashed`) readers.

The rule, precise enough to reimplement in any language:

1. Inputs: the file path as given to the client (a string, encoded UTF-8) and
   the pool's ring as published with the plan (`Plan.hash_weights[pool]`): a
   map from cache name (the cache host's node name) to a weight > 0. Caches
   of weight 0 are not in the ring. The name is the cache's identity, never
   its address: workers are told each cache as `name@root://address:port=weight`
   (one entry per line of the fleet's routing ConfigMap, `ring`, or commas in
   SWITCHYARD_CACHE_RING; see switchyard/routing/__init__.py), the address
   being the node's InternalIP, and they hash the name, so a host whose
   address changes keeps its files. An entry without `name@` is named by its
   host.
2. For each cache c: d = SHA-256(UTF-8(c) + b"\\x00" + UTF-8(path)); take the
   first 8 bytes of d as a big-endian unsigned 64-bit integer h, keep its top
   53 bits, h53 = h >> 11, and let u = (h53 + 0.5) / 2**53, so 0 < u < 1
   exactly in IEEE-754 double precision.
3. score(c) = -weight(c) / ln(u)   (double precision).
4. The ordered cache list is the caches by score, highest first; equal scores
   (practically never) go by name, ascending. A client reads the file from
   the first cache and falls back to the next ones in order.

Why this rule: the first cache is c with probability weight(c) / sum(weights),
so bytes spread over the ring in proportion to the published weights, one
copy per file. Adding a cache only takes files *to* the new cache (their
share w_new / sum); losing a cache only moves the files it held, each to its
second choice. No other file changes its cache. Only the weights the planner
publishes move files between surviving caches.

Hot files: a file many readers open gets more than one home. The operator
publishes, beside the ring, a list of hot files, each with a replica count k
(the fleet's routing ConfigMap, `hot`: one `k path` per line, see
switchyard/routing/__init__.py). For a file on that list, a reader applies:

5. Inputs: the ordered cache list O of steps 1-4, the file's k (an integer
   >= 2), and the reader's identity r, a string (the pod's name, see
   switchyard/routing/__init__.py). Let n = min(k, len(O)); when n < 2 the
   order is O, as for any other file.
6. d = SHA-256(b"reader\x00" + UTF-8(r) + b"\x00" + UTF-8(path)); take the
   first 8 bytes of d as a big-endian unsigned 64-bit integer g, and let
   i = g mod n (0-based).
7. The reader's order is O[i], then O[0..n-1] without O[i], in O's order,
   then O[n..], in O's order. It reads from the first and falls back to the
   next ones in order, as in step 4.

Files not on the list keep O. Why this rule: each of a hot file's first n
caches serves 1/n of its readers (within g's spread over readers: the
modulo's bias is below n / 2**64), so a hot file's load is split over n homes
instead of one; a reader always picks the same one for the same file (its
copy stays warm, its connection stays open); every reader keeps O's failover
order past its pick, and a cache lost from the ring moves only the readers
that picked it. The first n caches are the file's own top of the ring, so
growing k adds homes and keeps the old ones. The b"reader" prefix keeps d
apart from step 2's digests, even for a reader named like a cache.

Worked example (tests/unit/test_hashing.py checks it): ring sw1-c-0=1,
sw1-c-1=1, sw2-c-0=2, sw3-c-0=1 and path /store/data/Run2024/hot.root give
O = [sw2-c-0, sw3-c-0, sw1-c-1, sw1-c-0]. With k = 3, reader `reader-a` has
g = 0x1806389fb2e756e3, i = 1, order [sw3-c-0, sw2-c-0, sw1-c-1, sw1-c-0];
`reader-b`: g = 0x3178168802199d37, i = 2, [sw1-c-1, sw2-c-0, sw3-c-0, sw1-c-0].
"""

from __future__ import annotations

import hashlib
import math
from typing import Iterable, Mapping

_TOP53 = 2**53


def unit(cache: str, path: str) -> float:
    """The (0, 1) number of step 2."""
    digest = hashlib.sha256(cache.encode() + b"\x00" + path.encode()).digest()
    h53 = int.from_bytes(digest[:8], "big") >> 11
    return (h53 + 0.5) / _TOP53


def score(cache: str, path: str, weight: float = 1.0) -> float:
    return -weight / math.log(unit(cache, path))


def _ring(caches: Mapping[str, float] | Iterable[str]) -> dict[str, float]:
    if isinstance(caches, Mapping):
        return {c: float(w) for c, w in caches.items() if w > 0}
    return {c: 1.0 for c in caches}


def order(path: str, caches: Mapping[str, float] | Iterable[str]) -> list[str]:
    """The ordered cache list for a file: home first, then the fallbacks."""
    ring = _ring(caches)
    return sorted(ring, key=lambda c: (-score(c, path, ring[c]), c))


def home(path: str, caches: Mapping[str, float] | Iterable[str]) -> str | None:
    """The cache a file is read from (None for an empty ring)."""
    ring = _ring(caches)
    if not ring:
        return None
    return min(ring, key=lambda c: (-score(c, path, ring[c]), c))


def split(paths: Iterable[str], caches: Mapping[str, float] | Iterable[str]) -> dict[str, float]:
    """The share of `paths` each cache is home for: what its readers take from it when each file is read
    alike. Without paths, the expected split, weight / sum(weights); an empty ring splits nothing."""
    ring = _ring(caches)
    total = sum(ring.values())
    if not total:
        return {}
    counts = dict.fromkeys(sorted(ring), 0)
    for path in paths:
        counts[home(path, ring)] += 1
    files = sum(counts.values())
    if not files:
        return {c: ring[c] / total for c in counts}
    return {c: n / files for c, n in counts.items()}


def reader_pick(reader: str, path: str, replicas: int) -> int:
    """Step 6: which of a hot file's first `replicas` caches this reader reads it from (0-based)."""
    digest = hashlib.sha256(b"reader\x00" + reader.encode() + b"\x00" + path.encode()).digest()
    return int.from_bytes(digest[:8], "big") % replicas


def spread(ordered: list[str], reader: str, path: str, replicas: int) -> list[str]:
    """Steps 5-7: `ordered` (the file's order, step 4) as this reader reads a hot file of `replicas` homes."""
    n = min(replicas, len(ordered))
    if n < 2:
        return list(ordered)
    first = ordered[reader_pick(reader, path, n)]
    return [first] + [c for c in ordered[:n] if c != first] + ordered[n:]


def hot_order(path: str, caches: Mapping[str, float] | Iterable[str], reader: str, replicas: int) -> list[str]:
    """The ordered cache list for a hot file of `replicas` homes, as `reader` reads it."""
    return spread(order(path, caches), reader, path, replicas)
