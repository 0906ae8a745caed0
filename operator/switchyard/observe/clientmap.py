"""Which switch a client address sits behind (pure): the map the exporter reads from a mounted ConfigMap.

The operator renders it from the Nodes (InternalIPs and spec.podCIDR, and the
pod ranges Calico's or Cilium's IPAM gives each, by the facility's switch
label); the exporter looks each reader's address up in it,
longest prefix first. An address that matches nothing, or a host name, is
"unknown": the label's values are the facility's switches plus that one, and
"unattributed" for bytes the exporter can tie to no reader at all
(xrootd/monitoring.py: a file opened before it started, a login it never saw).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

UNKNOWN = "unknown"
UNATTRIBUTED = "unattributed"   # xrootd/monitoring.py's UNATTRIBUTED (the decoder imports nothing of observe/)
KEY = "clients.json"
SEEN_LIMIT = 65_536  # addresses remembered (then forgotten at once: a bound, not an LRU)  # the ConfigMap key, and the file name once mounted

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class InvalidClientMap(ValueError):
    pass


def client_address(host: str) -> Address | None:
    """The address in an XRootD client host ("[::10.0.0.5]", "[fd00::1]", "10.0.0.5"); None for a name."""
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        # XRootD writes IPv4 clients of a dual-stack socket as "::a.b.c.d" (IPv4-compatible).
        if address.packed[:12] == bytes(12) and int(address) > 1:
            return ipaddress.IPv4Address(address.packed[12:])
    return address


@dataclass(frozen=True)
class ClientMap:
    """(network, switch), most specific network first."""

    networks: tuple[tuple[Network, str], ...] = ()
    # address -> switch: a scan is over every node's networks (tens of thousands at scale), and
    # readers log in from the same addresses again and again
    _seen: dict = field(default_factory=dict, compare=False, repr=False, hash=False)

    @classmethod
    def from_switches(cls, switches: Mapping[str, Iterable[str]]) -> "ClientMap":
        """switch -> addresses or CIDRs; raises InvalidClientMap for a malformed one."""
        pairs = []
        for switch, cidrs in switches.items():
            if not isinstance(switch, str) or not switch or switch in (UNKNOWN, UNATTRIBUTED):
                raise InvalidClientMap(f"switch name {switch!r} is not usable")
            for cidr in cidrs:
                try:
                    pairs.append((ipaddress.ip_network(cidr, strict=False), switch))
                except (TypeError, ValueError):
                    raise InvalidClientMap(f"{cidr!r} of switch {switch} is not an address or CIDR") from None
        pairs.sort(key=lambda pair: (-pair[0].prefixlen, pair[0].version, str(pair[0]), pair[1]))
        return cls(tuple(pairs))

    @classmethod
    def from_json(cls, text: str) -> "ClientMap":
        try:
            document = json.loads(text)
        except json.JSONDecodeError as error:
            raise InvalidClientMap(f"not JSON: {error}") from None
        switches = document.get("switches") if isinstance(document, dict) else None
        if not isinstance(switches, dict) or not all(isinstance(v, list) for v in switches.values()):
            raise InvalidClientMap('expected {"switches": {switch: [address or CIDR, ...]}}')
        return cls.from_switches(switches)

    @property
    def switches(self) -> frozenset[str]:
        return frozenset(switch for _, switch in self.networks)

    def switch_of(self, host: str | None) -> str:
        address = client_address(host) if host else None
        if address is None:
            return UNKNOWN
        if address not in self._seen:
            if len(self._seen) >= SEEN_LIMIT:
                self._seen.clear()
            self._seen[address] = next((switch for network, switch in self.networks
                                        if address.version == network.version and address in network), UNKNOWN)
        return self._seen[address]


def is_network(text: str) -> bool:
    """An address or CIDR the map accepts (a Node's fields are not validated by the API server as such)."""
    try:
        ipaddress.ip_network(text, strict=False)
    except (TypeError, ValueError):
        return False
    return True


def render(switches: Mapping[str, Iterable[str]]) -> str:
    """The ConfigMap's JSON, stable for equal input (sorted, duplicates dropped)."""
    ClientMap.from_switches(switches)  # refuse what the exporter would refuse
    return json.dumps({"switches": {s: sorted(set(switches[s])) for s in sorted(switches)}}, indent=1, sort_keys=True) + "\n"
