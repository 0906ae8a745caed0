#!/usr/bin/env bash
# Remove everything a kind cluster made with the podman provider (make e2e-kind, docs/kind.md),
# also after a failed or interrupted create: the node containers and their /var volumes, the
# cluster's podman network with its bridge, host-local leases and DNS rule, and the host iptables
# chains podman's CNI plugins add (only once no podman container is left to need them), and the
# machine-wide kernel settings the nodes' kubelets changed.
# `kind delete cluster` alone leaves the network, the leases and the chains behind.
#   e2e/kind/down.sh [CLUSTER]   (default switchyard; KIND_NETWORK, default switchyard-kind)
set -uo pipefail
CLUSTER="${1:-${KIND_CLUSTER:-switchyard}}"
NETWORK="${KIND_NETWORK:-switchyard-kind}"
CACHE="${SWITCHYARD_CACHE:-$HOME/.cache/switchyard}"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$CACHE/kind/containers.conf}"
log() { printf '[kind-down] %s\n' "$*" >&2; }
command -v podman >/dev/null || { log "no podman: nothing to remove"; exit 0; }

# Nodes: kind labels each with its cluster, and each node's /var volume with "<node>=true".
nodes="$(podman ps -a --filter "label=io.x-k8s.kind.cluster=$CLUSTER" --format '{{.Names}}')"
[ -z "$nodes" ] || { log "removing nodes: $(echo $nodes)"; podman rm -f -v -t 2 $nodes >/dev/null; }
for volume in $(podman volume ls -q); do
  podman volume inspect --format '{{range $k, $v := .Labels}}{{$k}} {{end}}' "$volume" 2>/dev/null \
    | tr ' ' '\n' | grep -qE "^$CLUSTER-(control-plane|worker)[0-9]*$" \
    && { log "removing volume $volume"; podman volume rm -f "$volume" >/dev/null; }
done

# The network, if no container of another cluster still uses it.
if podman network exists "$NETWORK"; then
  bridge="$(podman network inspect --format '{{.NetworkInterface}}' "$NETWORK")"
  if [ -n "$(podman ps -a --filter "network=$NETWORK" -q)" ]; then
    log "network $NETWORK is still in use: left in place"
  else
    log "removing network $NETWORK (bridge $bridge)"
    podman network rm -f "$NETWORK" >/dev/null
    # The dnsname plugin's rule letting the bridge's containers reach its DNS server.
    for ipt in iptables ip6tables; do
      while $ipt -D INPUT -i "$bridge" -p udp -m udp --dport 53 -j ACCEPT 2>/dev/null; do :; done
    done
    ip link del "$bridge" 2>/dev/null || true
    rm -rf "/var/lib/cni/networks/$NETWORK" "/run/containers/cni/dnsname/$NETWORK"
  fi
fi

# podman's CNI chains are shared by all its containers; podman makes them again when needed.
if [ -z "$(podman ps -q)" ]; then
  for ipt in iptables ip6tables; do
    $ipt -D FORWARD -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD 2>/dev/null
    $ipt -t nat -D PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT 2>/dev/null
    $ipt -t nat -D OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT 2>/dev/null
    $ipt -t nat -D POSTROUTING -m comment --comment "CNI portfwd requiring masquerade" -j CNI-HOSTPORT-MASQ 2>/dev/null
    for table in filter nat; do
      for chain in $($ipt -t $table -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^CNI-/ {print $2}'); do
        $ipt -t $table -F "$chain"
      done
      for chain in $($ipt -t $table -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^CNI-/ {print $2}'); do
        $ipt -t $table -X "$chain"
      done
    done
  done
fi

# The machine's kernel settings the kubelets changed (saved by e2e/kind/up.sh), once no kind node
# of any cluster is left.
saved="$CACHE/kind/sysctls"
if [ -f "$saved" ] && [ -z "$(podman ps -a --filter label=io.x-k8s.kind.cluster -q)" ]; then
  while read -r key value; do
    [ "$(cat "/proc/sys/$key")" = "$value" ] || { echo "$value" > "/proc/sys/$key"; log "sysctl $key restored to $value"; }
  done < "$saved"
  rm -f "$saved"
fi

[ "$CLUSTER" != switchyard ] || rm -f "$CACHE/kind/kubeconfig"   # e2e/kind/up.sh's

left="$(podman ps -a --filter "label=io.x-k8s.kind.cluster=$CLUSTER" -q)"
cni="$( (iptables-save; ip6tables-save) 2>/dev/null | grep -c 'CNI-' || true)"
log "left: $(echo "$left" | grep -c . || true) node containers, network $NETWORK $(podman network exists "$NETWORK" && echo present || echo gone), $cni CNI iptables lines"
[ -z "$left" ]
