#!/usr/bin/env bash
# Create the kind cluster of e2e/kind/cluster.yaml with kind's podman provider and switchyard's
# own node image (hack/build-images.sh kind), load switchyard's images into its nodes, install
# the chart into a namespace enforcing Pod Security "restricted", apply e2e/kind/facility.yaml and
# check it Ready with its caches and workers on the planned switches (make e2e-kind, docs/kind.md).
# e2e/kind/down.sh removes all of it again.
# Prints each step's seconds. KIND_NETWORK: the podman network (default switchyard-kind).
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
CACHE="${SWITCHYARD_CACHE:-$HOME/.cache/switchyard}"
OCI="$CACHE/images/oci"
K8S_VERSION=v1.31.4
VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO/operator/pyproject.toml" | head -n1)"
CLUSTER=switchyard   # e2e/kind/cluster.yaml's name
NAMESPACE=switchyard-system
export PATH="$CACHE/bin:$PATH" KUBECONFIG="$CACHE/kind/kubeconfig"
export KIND_EXPERIMENTAL_PROVIDER=podman KIND_EXPERIMENTAL_PODMAN_NETWORK="${KIND_NETWORK:-switchyard-kind}"
# Podman's default rlimits are above what a process may set on hosts without CAP_SYS_RESOURCE
# ("error setting rlimit type 7"), and crun refuses hybrid cgroups: kind builds its own
# `podman run` lines, so both go in a containers.conf every podman call of kind reads.
export CONTAINERS_CONF="$CACHE/kind/containers.conf"
mkdir -p "$CACHE/kind"
cat > "$CONTAINERS_CONF" <<CONF
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=20000:20000"]
[engine]
runtime = "runc"
CONF

log() { printf '[kind-up] %s\n' "$*" >&2; }

# The nodes' kubelets set kernel settings that are the whole machine's, not the container's
# (setupKernelTunables): keep the machine's own values for e2e/kind/down.sh to put back.
SYSCTLS="vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes"
if [ ! -f "$CACHE/kind/sysctls" ]; then
  for key in $SYSCTLS; do echo "$key $(cat "/proc/sys/$key")"; done > "$CACHE/kind/sysctls"
fi
T0=$(date +%s.%N); T=$T0
step() { local now; now=$(date +%s.%N); log "$(awk -v a="$T" -v b="$now" 'BEGIN{printf "%.0f s", b-a}'): $*"; T=$now; }

for archive in operator xcache dask kind-node; do
  [ -f "$OCI/$archive.tar" ] || { log "$OCI/$archive.tar is missing: make images; hack/build-images.sh kind"; exit 1; }
done
# One create, no retry: the join flake this once retried ("error uploading crisocket", a Node
# registered after kubeadm's fixed 60 s) is fixed in cluster.yaml's kubeadm JoinConfiguration patch.
kind create cluster --config "$REPO/e2e/kind/cluster.yaml" --image "localhost/switchyard-kind-node:$K8S_VERSION" \
  --kubeconfig "$KUBECONFIG" --wait 5m
kubectl wait --for=condition=Ready nodes --all --timeout=5m >/dev/null
step "cluster $CLUSTER: $(kubectl get nodes --no-headers | wc -l) nodes Ready"
bash "$REPO/e2e/kind/annotate.sh" 25 >/dev/null

# The operator may run anywhere, caches only on NVMe nodes, workers on any worker node.
load() { # ARCHIVE NODE...
  local archive=$1; shift
  kind load image-archive "$OCI/$archive.tar" --name "$CLUSTER" --nodes "$(IFS=,; echo "$*")" >/dev/null
}
all="$(kubectl get nodes -o jsonpath='{.items[*].metadata.name}')"
nvme="$(kubectl get nodes -l switchyard.dev/nvme -o jsonpath='{.items[*].metadata.name}')"
workers="$(kubectl get nodes -l switchyard.dev/switch -o jsonpath='{.items[*].metadata.name}')"
load operator $all
load xcache $nvme
load dask $workers
step "images loaded (operator on $(wc -w <<<"$all") nodes, xcache on $(wc -w <<<"$nvme"), dask on $(wc -w <<<"$workers"))"

kubectl create namespace "$NAMESPACE" --dry-run=client -o yaml \
  | kubectl label --local -f - -o yaml pod-security.kubernetes.io/enforce=restricted \
  | kubectl apply -f - >/dev/null
helm upgrade --install switchyard "$REPO/charts/switchyard" -n "$NAMESPACE" \
  --set image.repository=localhost/switchyard --set "image.tag=$VERSION" --wait --timeout 5m >/dev/null
step "chart installed in $NAMESPACE (Pod Security restricted): $(kubectl -n "$NAMESPACE" get pods --no-headers | awk '{print $1, $3}' | paste -sd, -)"

# examples/facility.yaml's caches and 4-core workers fit no node reporting this machine's 2 CPUs:
# e2e/kind/facility.yaml is the same shape, sized for them.
kubectl apply -f "$REPO/e2e/kind/origin.yaml" >/dev/null
kubectl wait --for=condition=Ready pod/kind-origin --timeout=3m >/dev/null
kubectl apply -f "$REPO/e2e/kind/facility.yaml" >/dev/null
kubectl wait --for=condition=Ready analysisfacility/kind --timeout=5m >/dev/null
kubectl wait --for=condition=Ready pods -n default -l app.kubernetes.io/part-of=switchyard --timeout=5m >/dev/null
step "facility kind Ready: $(kubectl get analysisfacility kind --no-headers | awk '{print $3" switches, "$4" caches, "$5" workers"}')"

# Every cache and worker runs on the switch its name says the plan put it on, caches on NVMe nodes.
wrong=0
while read -r pod node; do
  planned="$(sed -n 's/^kind-\(xcache\|dask\)-\(rack-[a-z]\)-.*/\2/p' <<<"$pod")"
  [ -n "$planned" ] || continue
  labels="$(kubectl get node "$node" -o jsonpath='{.metadata.labels.switchyard\.dev/switch} {.metadata.labels.switchyard\.dev/nvme}')"
  read -r switch nvme <<<"$labels"
  if [ "$switch" != "$planned" ] || { [[ $pod == kind-xcache-* ]] && [ -z "$nvme" ]; }; then
    log "$pod runs on $node (switch $switch, nvme ${nvme:-none}), planned on $planned"; wrong=1
  fi
done < <(kubectl get pods -n default -o jsonpath='{range .items[*]}{.metadata.name} {.spec.nodeName}{"\n"}{end}')
[ "$wrong" = 0 ] || exit 1
step "caches on their switches' NVMe nodes, workers on their switches: $(kubectl get pods -n default -o jsonpath='{range .items[*]}{.metadata.name}={.spec.nodeName} {end}')"

# A real read through a cache: a worker reads the origin's file twice from the endpoint it was
# given (its switch's cache Service); the bytes are the origin's, and the cache's disk holds them.
want="$(kubectl logs kind-origin | awk 'NR == 1 {print $1}')"
worker="$(kubectl get pods -n default -l app.kubernetes.io/component=worker,switchyard.dev/switch=rack-b -o name | head -n1)"
reads="$(kubectl exec -n default "$worker" -c worker -- sh -c 'for i in 1 2; do
  s=$(date +%s.%N); xrdcp -f -s "$SWITCHYARD_CACHE_ENDPOINT//data/kind.bin" /tmp/kind.bin || exit 1
  echo "$SWITCHYARD_CACHE_ENDPOINT $(sha256sum < /tmp/kind.bin | cut -d" " -f1) $(awk -v a=$s -v b=$(date +%s.%N) "BEGIN{printf \"%.2f\", b-a}")"
done')"
cached="$(kubectl exec -n default kind-xcache-rack-b-0 -c xrootd -- du -sb /srv/switchyard-kind/nvme0 | cut -f1)"
log "reads: $(echo $reads); rack-b cache disk: $cached bytes"
[ "$(awk -v w="$want" '$2 == w && $1 ~ /kind-xcache-rack-b\./' <<<"$reads" | wc -l)" = 2 ] && [ "$cached" -ge 20971520 ] \
  || { log "the reads through the rack-b cache did not return the origin's file ($want)"; exit 1; }
step "20 MiB read twice through the rack-b cache, sha256 the origin's, in the cache's disk"

# The bytes are measured too: the rack-b cache's exporter counts both reads under the reader's switch
# (its f-stream records, the client map from the Nodes' pod ranges), as the drift check and Grafana read them.
served_rack_b() {
  kubectl exec -n default kind-xcache-rack-b-0 -c exporter -- python3 -c 'import urllib.request
text = urllib.request.urlopen("http://127.0.0.1:9933/metrics", timeout=3).read().decode()
print(int(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith("switchyard_xcache_served_bytes_total{") and "client_switch=\"rack-b\"" in line)))'
}
for _ in $(seq 60); do
  served="$(served_rack_b)"; [ "$served" -ge 41943040 ] && break; sleep 1
done
[ "$served" -ge 41943040 ] || { log "the rack-b cache's exporter counted $served bytes for rack-b's reader, not 2 x 20 MiB"; exit 1; }
step "the rack-b exporter counted $served bytes read by rack-b's worker"
log "total $(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.0f s", b-a}'); kubeconfig $KUBECONFIG"
