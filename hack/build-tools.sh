#!/usr/bin/env bash
# Build the pinned local-cluster tools into a cache outside the work tree.
# Idempotent: a tool whose versioned binary already exists is not rebuilt.
# Usage: hack/build-tools.sh            (prints the bin directory on success)
set -euo pipefail

K8S_VERSION=v1.31.4
K8S_STAGING_VERSION=v0.31.4
ETCD_VERSION=v3.5.17
# The etcd kubeadm v1.31.4 names (registry.k8s.io/etcd:3.5.15-0): the kind node image's
# (hack/build-images.sh kind); kwokctl keeps ETCD_VERSION.
KUBEADM_ETCD_VERSION=v3.5.15
KWOK_VERSION=v0.6.1
HELM_VERSION=v3.16.3
KIND_VERSION=v0.25.0
# The DNS server of the real nodes (e2e/realnodes.py): CoreDNS of the release line
# Kubernetes 1.31 ships with.
COREDNS_VERSION=v1.11.3
# The manifest checker `make test` runs over the chart's and the operator's manifests
# (operator/tests/unit/test_kube_score.py).
KUBE_SCORE_VERSION=v1.20.0
# The image registry the real-node e2e pushes to and its nodes' containerd pull from
# (a local registry the e2e harness runs, e2e/realnodes.py): the CNCF distribution registry.
DISTRIBUTION_VERSION=v3.1.2

CACHE="${SWITCHYARD_CACHE:-$HOME/.cache/switchyard}"
BIN="$CACHE/bin"
WORK="$CACHE/build"
mkdir -p "$BIN" "$WORK"
export GOFLAGS="${GOFLAGS:--trimpath}" CGO_ENABLED=0

log() { printf '[build-tools] %s\n' "$*" >&2; }

# One build at a time per cache (two shells running `make tools` would share
# the wrapper modules' directories); the lock is released when this script exits.
exec 9>"$CACHE/.build-tools.lock"
flock 9

# have NAME VERSION: true when BIN/NAME is the pinned version already.
have() { [ -x "$BIN/$1" ] && [ "$(cat "$BIN/.$1.version" 2>/dev/null)" = "$2" ]; }
mark() { echo "$2" > "$BIN/.$1.version"; }

go_install() { # NAME MODULE_PATH VERSION
  local name=$1 pkg=$2 version=$3
  have "$name" "$version" && return 0
  log "building $name $version (go install $pkg)"
  GOBIN="$BIN" go install "$pkg@$version"
  mark "$name" "$version"
}

# build_wrapped NAME MODULE VERSION: modules whose replace directives make `go
# install` refuse them are built from a throwaway wrapper module of their own.
build_wrapped() {
  local name=$1 module=$2 version=$3
  have "$name" "$version" && return 0
  log "building $name $version"
  local dir="$WORK/$name"
  rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
  go mod init "switchyard.local/$name" >/dev/null 2>&1
  go get "$module@$version"
  go build -o "$BIN/$name" "$module"
  mark "$name" "$version"
}

K8S_STAGING="api apiextensions-apiserver apimachinery apiserver cli-runtime client-go
cloud-provider cluster-bootstrap code-generator component-base component-helpers
controller-manager cri-api cri-client csi-translation-lib dynamic-resource-allocation
endpointslice kms kube-aggregator kube-controller-manager kube-proxy kube-scheduler
kubectl kubelet metrics mount-utils pod-security-admission sample-apiserver
sample-cli-plugin sample-controller"
# kubeadm: the kind node image's (hack/build-images.sh kind).
K8S_CMDS="kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy kubeadm"
# Without these every binary reports v0.0.0-master (and a kubelet registers so).
K8S_LDFLAGS="-X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=31 -X k8s.io/component-base/version.gitTreeState=clean"

build_kubernetes() {
  local missing="" c
  for c in $K8S_CMDS; do have "$c" "$K8S_VERSION" || missing="$missing $c"; done
  [ -z "$missing" ] && return 0
  log "building Kubernetes $K8S_VERSION:$missing (about 10 minutes on 2 cores when cold)"
  local dir="$WORK/kubernetes"
  mkdir -p "$dir" && cd "$dir"
  {
    echo "module switchyard.local/kubernetes"
    echo
    echo "go 1.22"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    for m in $K8S_STAGING; do echo "replace k8s.io/$m => k8s.io/$m $K8S_STAGING_VERSION"; done
  } > go.mod
  {
    echo "//go:build tools"
    echo "package tools"
    echo "import ("
    for c in $K8S_CMDS; do echo "	_ \"k8s.io/kubernetes/cmd/$c\""; done
    echo ")"
  } > tools.go
  go mod tidy
  for c in $missing; do
    log "  go build $c"
    go build -ldflags "$K8S_LDFLAGS" -o "$BIN/$c" "k8s.io/kubernetes/cmd/$c"
    mark "$c" "$K8S_VERSION"
  done
}

command -v go >/dev/null || { log "Go is required (https://go.dev/dl)"; exit 1; }
go_install kwokctl sigs.k8s.io/kwok/cmd/kwokctl "$KWOK_VERSION"
go_install kwok sigs.k8s.io/kwok/cmd/kwok "$KWOK_VERSION"
build_wrapped etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
build_wrapped "etcd-$KUBEADM_ETCD_VERSION" go.etcd.io/etcd/server/v3 "$KUBEADM_ETCD_VERSION"
build_kubernetes
# CoreDNS in a wrapper module of its own: in the Kubernetes one its dependencies
# (grpc, otel, the DNS libraries) would raise the versions the Kubernetes
# components are built with.
build_wrapped coredns github.com/coredns/coredns "$COREDNS_VERSION"
go_install helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION"
go_install kind sigs.k8s.io/kind "$KIND_VERSION"
go_install kube-score github.com/zegl/kube-score/cmd/kube-score "$KUBE_SCORE_VERSION"
go_install registry github.com/distribution/distribution/v3/cmd/registry "$DISTRIBUTION_VERSION"
log "tools ready in $BIN"
echo "$BIN"
