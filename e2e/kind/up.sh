#!/usr/bin/env bash
# Create the kind cluster of e2e/kind/cluster.yaml with kind's podman provider and switchyard's
# own node image (hack/build-images.sh kind), load switchyard's images into its nodes, install
# the chart into a namespace enforcing Pod Security "restricted" and apply examples/facility.yaml
# (make e2e-kind, docs/kind.md). e2e/kind/down.sh removes all of it again.
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
# A second try when the first fails: on a busy 2-core machine a worker's kubelet may get its
# client certificate later than kubeadm join's 60 s wait for the Node ("nodes \"switchyard-worker4\"
# not found", "error uploading crisocket"; seen once in four 7-node creates). kind deletes the
# nodes of a failed create itself.
for attempt in 1 2; do
  kind create cluster --config "$REPO/e2e/kind/cluster.yaml" --image "localhost/switchyard-kind-node:$K8S_VERSION" \
    --kubeconfig "$KUBECONFIG" --wait 5m && break
  [ "$attempt" = 1 ] || exit 1
  log "kind create failed: trying once more"
done
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

kubectl apply -f "$REPO/examples/facility.yaml" >/dev/null
step "examples/facility.yaml applied"
log "total $(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.0f s", b-a}'); kubeconfig $KUBECONFIG"
