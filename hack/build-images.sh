#!/usr/bin/env bash
# Build switchyard's container images with buildah, without a Docker engine or
# an image registry: a Debian bookworm base made by debootstrap, a Python base
# on it, then the operator (the repository's Dockerfile), XCache, Dask worker and
# pause images from the Containerfiles in images/, and the dask-gateway image
# (images/gateway/Containerfile) the chart's gateway runs.
#
# Storage (buildah --storage-driver vfs --root) and the results (one OCI archive
# per image) live in the cache, outside the work tree:
#   ${SWITCHYARD_CACHE:-~/.cache/switchyard}/images/{storage,oci,wheels,context}
# Each image is keyed by a hash of its inputs (Containerfile, context files,
# build arguments, its base's key); a rerun with unchanged inputs builds nothing.
#
#   hack/build-images.sh                              build (or reuse) all images
#   hack/build-images.sh kind                         the kind node image (docs/kind.md)
#   REGISTRY=registry.example.org/t2 PUSH=1 hack/build-images.sh
#                                                     and push them to a registry
# Every image is built and archived as localhost/NAME:TAG, whatever REGISTRY is, so
# a push neither rebuilds nor moves a key. PUSH=1 pushes the five images a cluster
# runs (operator, XCache, Dask, gateway, pause) to REGISTRY/NAME:TAG, e.g.
# registry.example.org/t2/switchyard-xcache:0.1.0; PUSH_TLS_VERIFY=false for a
# registry served over plain HTTP (the real-node e2e's, e2e/realnodes.py).
# Prints one line per image: name, tag, key, seconds spent, OCI archive size; and
# per pushed image: "pushed", the reference, its manifest digest, seconds spent.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${SWITCHYARD_CACHE:-$HOME/.cache/switchyard}"
IMAGES="$CACHE/images"
OCI="$IMAGES/oci"
WHEELS="$IMAGES/wheels"
REGISTRY="${REGISTRY:-localhost}"
REGISTRY="${REGISTRY%/}"
PUSH="${PUSH:-0}"
PUSH_TLS_VERIFY="${PUSH_TLS_VERIFY:-true}"
# The name every image is built under (the archives' and the buildah storage's).
LOCAL=localhost
SUITE=bookworm
DISTRIBUTED_VERSION=2024.12.1
# The Dask image runs gateway clusters' schedulers (dask_gateway.scheduler_preload) too: the
# client package of the gateway server switchyard[gateway] pins (operator/pyproject.toml).
DASK_GATEWAY_VERSION="$(sed -n 's/.*"dask-gateway-server\[kubernetes\]==\([^"]*\)".*/\1/p' "$REPO/operator/pyproject.toml" | head -n1)"
PAUSE_VERSION=3.10
K8S_VERSION=v1.31.4
# The kind node image's (build_kind): the tags kubeadm v1.31.4 asks for, from binaries
# hack/build-tools.sh builds into $TOOLS.
KUBEADM_ETCD_TAG=3.5.15-0
COREDNS_VERSION=v1.11.3
TOOLS="$CACHE/bin"
VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO/operator/pyproject.toml" | head -n1)"

mkdir -p "$OCI" "$WHEELS" "$IMAGES/context"
B=(buildah --storage-driver vfs --root "$IMAGES/storage" --runroot "$IMAGES/runroot")

log() { printf '[build-images] %s\n' "$*" >&2; }
need() { command -v "$1" >/dev/null || { log "$1 is missing: run hack/install-realnode-deps.sh"; exit 1; }; }
need buildah; need debootstrap; need gcc; need go

# One build at a time per cache.
exec 9>"$IMAGES/.lock"
flock 9

# The Debian mirror this machine's apt uses (deb822 or one-line sources).
mirror() {
  local m
  m="$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | head -n1 || true)"
  [ -n "$m" ] || m="$(grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
                      | awk '{print $2}' | grep -v security | head -n1 || true)"
  echo "${m:-http://deb.debian.org/debian}"
}

# tree_hash DIR: one hash over the names and contents of DIR's files.
tree_hash() {
  (cd "$1" && find . -type f ! -name rootfs.tar -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
}

# context NAME SRC...: a fresh build context in the cache holding the given
# repository paths (the work tree's .venv and caches never enter an image).
context() {
  local dir="$IMAGES/context/$1"; shift
  rm -rf "$dir" && mkdir -p "$dir"
  local path
  for path in "$@"; do
    mkdir -p "$dir/$(dirname "$path")"
    cp -a "$REPO/$path" "$dir/$path"
  done
  # The operator's tests are not part of any image (and change more often than it).
  rm -rf "$dir/operator/tests"
  find "$dir" \( -name __pycache__ -o -name '*.egg-info' -o -name .pytest_cache -o -name build \) -prune -exec rm -rf {} +
  echo "$dir"
}

declare -A KEY BUILT
REPORT="$IMAGES/report.tsv"

# have_image TAG KEY: the OCI archive for KEY exists; load it into storage if needed.
have_image() {
  local name=$1 tag=$2 key=$3 archive="$OCI/$1.tar"
  [ -f "$archive" ] && [ "$(cat "$OCI/$name.key" 2>/dev/null)" = "$key" ] || return 1
  if ! "${B[@]}" inspect --type image "$tag" >/dev/null 2>&1; then
    "${B[@]}" pull -q "oci-archive:$archive" >/dev/null
  fi
  return 0
}

# build NAME TAG CONTEXT CONTAINERFILE KEY_EXTRA [buildah bud args...]
build() {
  local name=$1 tag=$2 ctx=$3 file=$4 extra=$5; shift 5
  local key
  key="$(printf '%s\n' "$(tree_hash "$ctx")" "$extra" "$tag" "$*" | sha256sum | cut -c1-16)"
  KEY[$name]=$key
  if have_image "$name" "$tag" "$key"; then
    log "$name: inputs unchanged ($key), reusing $OCI/$name.tar"
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$tag" "$key" "cached" "$(stat -c %s "$OCI/$name.tar")"
    return 0
  fi
  log "$name: building $tag ($key)"
  BUILT[$name]=1
  local start end
  start=$(date +%s.%N)
  "${B[@]}" bud --quiet --isolation chroot --network host --layers=false \
    -f "$file" -t "$tag" "$@" "$ctx" >/dev/null
  rm -f "$OCI/$name.tar" "$OCI/$name.key"
  "${B[@]}" push -q "$tag" "oci-archive:$OCI/$name.tar.tmp:$tag" >/dev/null
  mv "$OCI/$name.tar.tmp" "$OCI/$name.tar"
  echo "$key" > "$OCI/$name.key"
  end=$(date +%s.%N)
  local seconds size
  seconds=$(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.0f", b-a}')
  size=$(stat -c %s "$OCI/$name.tar")
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$name" "$tag" "$key" "$seconds" "$size" >> "$REPORT"
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$tag" "$key" "${seconds}s" "$size"
}

# 1. Debian base: debootstrap minbase from this machine's mirror.
build_debian() {
  local tag="$LOCAL/switchyard-debian:$SUITE" m ctx
  m="$(mirror)"
  ctx="$IMAGES/context/debian"
  # This function's own text stands for how the base is made (not the whole script: a change to
  # the push below must not rebuild every image).
  local key_inputs="$SUITE $m $(sha256sum "$REPO/images/debian/Containerfile" | cut -c1-16) $(declare -f build_debian | sha256sum | cut -c1-16)"
  local key
  key="$(printf '%s' "$key_inputs" | sha256sum | cut -c1-16)"
  if have_image debian "$tag" "$key"; then
    KEY[debian]=$key
    log "debian: inputs unchanged ($key), reusing $OCI/debian.tar"
    printf '%s\t%s\t%s\t%s\t%s\n' debian "$tag" "$key" cached "$(stat -c %s "$OCI/debian.tar")"
    return 0
  fi
  log "debian: debootstrap $SUITE from $m"
  local start root
  start=$(date +%s.%N)
  rm -rf "$ctx" && mkdir -p "$ctx"
  root="$(mktemp -d "$IMAGES/rootfs.XXXXXX")"
  debootstrap --variant=minbase "$SUITE" "$root" "$m" >"$IMAGES/debootstrap.log" 2>&1 \
    || { log "debootstrap failed: $IMAGES/debootstrap.log"; rm -rf "$root"; exit 1; }
  echo "deb $m $SUITE main" > "$root/etc/apt/sources.list"
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
         "$root"/var/log/*.log "$root"/tmp/*
  tar --numeric-owner -C "$root" -cf "$ctx/rootfs.tar" .
  rm -rf "$root"
  cp "$REPO/images/debian/Containerfile" "$ctx/"
  local t0=$start
  build debian "$tag" "$ctx" "$ctx/Containerfile" "$key_inputs" >/dev/null
  # build() keys on the context too; the base's key is its inputs only (the tar
  # differs between runs by timestamps), so store that one.
  echo "$key" > "$OCI/debian.key"
  KEY[debian]=$key
  local seconds
  seconds=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.0f", b-a}')
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" debian-total "$tag" "$key" "$seconds" "$(stat -c %s "$OCI/debian.tar")" >> "$REPORT"
  printf '%s\t%s\t%s\t%s\t%s\n' debian "$tag" "$key" "${seconds}s" "$(stat -c %s "$OCI/debian.tar")"
  rm -f "$ctx/rootfs.tar"
}

# Wheels for the Python images, fetched on the host (pip inside a build
# container cannot verify TLS here), installed inside with --no-index.
fetch_wheels() {
  local key
  key="$( (cat "$REPO/operator/pyproject.toml"; echo "distributed==$DISTRIBUTED_VERSION dask-gateway==$DASK_GATEWAY_VERSION setuptools>=77 wheel") | sha256sum | cut -c1-16)"
  [ "$(cat "$WHEELS/.key" 2>/dev/null)" = "$key" ] && return 0
  log "wheels: pip wheel for the operator's dependencies, distributed==$DISTRIBUTED_VERSION and dask-gateway==$DASK_GATEWAY_VERSION"
  local tmp
  tmp="$(mktemp -d)"
  cp -a "$REPO/operator" "$tmp/operator"
  rm -rf "$tmp/operator"/*.egg-info "$tmp/operator/build"
  # [worker]: the readers the Dask image adds for switchyard.routing (fsspec-xrootd, xrootd, uproot);
  # [gateway]: dask-gateway-server with its proxy binary and kubernetes_asyncio (the gateway image);
  # dask-gateway: the scheduler preload of gateway clusters (the Dask image). One resolution for all.
  python3 -m pip wheel -q -w "$WHEELS" "$tmp/operator[worker,gateway]" "distributed==$DISTRIBUTED_VERSION" \
    "dask-gateway==$DASK_GATEWAY_VERSION" "setuptools>=77" wheel
  # switchyard itself is installed from the context, not from a wheel.
  rm -f "$WHEELS"/switchyard-*.whl
  rm -rf "$tmp"
  echo "$key" > "$WHEELS/.key"
}

PIP_OFFLINE=(--build-arg "PIP_INSTALL_OPTIONS=--no-index --find-links /wheels" -v "$WHEELS:/wheels:ro")

# in_image TAG CMD...: CMD run in a container of TAG, as the image's user.
in_image() {
  local tag=$1 ctr status=0; shift
  ctr="$("${B[@]}" from -q "$tag")"
  "${B[@]}" run --isolation chroot "$ctr" -- "$@" || status=$?
  "${B[@]}" rm "$ctr" >/dev/null 2>&1 || true
  return $status
}

# A freshly built Dask image runs a gateway cluster's scheduler: its preload imports.
check_dask() {
  in_image "$1" python -c 'import dask_gateway.scheduler_preload, dask_gateway, distributed; print("dask-gateway", dask_gateway.__version__, "distributed", distributed.__version__)' >&2 \
    || { log "dask: the image cannot import dask_gateway.scheduler_preload"; exit 1; }
}

# A freshly built gateway image: switchyard.gateway.backend imports, the proxy binary is there,
# and dask-gateway-server loads SwitchyardBackend and gets as far as its setup, which refuses to
# start without a facility (the error names the setting).
check_gateway() {
  local out
  in_image "$1" python -c 'import switchyard.gateway.backend as b, dask_gateway_server as s, dask_gateway_server.proxy.core as p, os; exe = os.path.join(os.path.dirname(p.__file__), "dask-gateway-proxy"); assert os.access(exe, os.X_OK), exe; print("dask-gateway-server", s.__version__, "with", exe)' >&2 \
    || { log "gateway: the image lacks the backend or the proxy"; exit 1; }
  out="$(in_image "$1" sh -c 'printf "c.DaskGateway.backend_class = \"switchyard.gateway.backend.SwitchyardBackend\"\nc.DaskGateway.address = \"127.0.0.1:0\"\nc.Proxy.address = \"127.0.0.1:0\"\n" > /tmp/gw.py && cd /tmp && dask-gateway-server -f /tmp/gw.py' 2>&1 || true)"
  grep -q "c.SwitchyardBackend.facility must name the AnalysisFacility" <<<"$out" \
    || { log "gateway: the image's dask-gateway-server did not load SwitchyardBackend:"; echo "$out" >&2; exit 1; }
  log "gateway: dask-gateway-server in the image loads SwitchyardBackend (stopped at its facility check, as configured)"
}

# pause: static pause.c from the Kubernetes module the tools are built from.
build_pause() {
  local src ctx
  src="$(go env GOMODCACHE)/k8s.io/kubernetes@$K8S_VERSION/build/pause/linux/pause.c"
  if [ ! -f "$src" ]; then
    (cd "$(mktemp -d)" && go mod init switchyard.local/pause >/dev/null 2>&1 \
       && GOFLAGS=-mod=mod go mod download "k8s.io/kubernetes@$K8S_VERSION")
  fi
  ctx="$(context pause images/pause/Containerfile)"
  cp "$src" "$ctx/pause.c"
  gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE_VERSION-switchyard" -o "$ctx/images/pause/pause" "$src"
  strip "$ctx/images/pause/pause"
  rm -f "$ctx/pause.c"
  # The key: pause.c's hash (the static binary differs by build path only).
  build pause "$LOCAL/pause:$PAUSE_VERSION" "$ctx/images/pause" "$ctx/images/pause/Containerfile" \
    "$(sha256sum "$src" | cut -c1-16) $(gcc -dumpfullversion)"
}

build_all() {
  build_debian
  local debian="$LOCAL/switchyard-debian:$SUITE"
  local python="$LOCAL/switchyard-python:3.11-$SUITE"
  local ctx
  ctx="$(context python images/python/Containerfile)"
  build python "$python" "$ctx" "$ctx/images/python/Containerfile" "${KEY[debian]}" --build-arg "BASE=$debian"

  fetch_wheels
  local wheels_key
  wheels_key="$(cat "$WHEELS/.key")"

  ctx="$(context operator Dockerfile operator)"
  build operator "$LOCAL/switchyard:$VERSION" "$ctx" "$ctx/Dockerfile" "${KEY[python]} $wheels_key" \
    --build-arg "BASE=$python" "${PIP_OFFLINE[@]}"

  ctx="$(context xcache images/xcache/Containerfile operator)"
  build xcache "$LOCAL/switchyard-xcache:$VERSION" "$ctx" "$ctx/images/xcache/Containerfile" \
    "${KEY[python]} $wheels_key" --build-arg "BASE=$python" "${PIP_OFFLINE[@]}"

  ctx="$(context dask images/dask/Containerfile operator)"
  build dask "$LOCAL/switchyard-dask:$VERSION" "$ctx" "$ctx/images/dask/Containerfile" \
    "${KEY[python]} $wheels_key" --build-arg "BASE=$python" \
    --build-arg "DISTRIBUTED_VERSION=$DISTRIBUTED_VERSION" --build-arg "DASK_GATEWAY_VERSION=$DASK_GATEWAY_VERSION" \
    "${PIP_OFFLINE[@]}"
  [ -z "${BUILT[dask]:-}" ] || check_dask "$LOCAL/switchyard-dask:$VERSION"

  ctx="$(context gateway images/gateway/Containerfile operator)"
  build gateway "$LOCAL/switchyard-gateway:$VERSION" "$ctx" "$ctx/images/gateway/Containerfile" \
    "${KEY[python]} $wheels_key" --build-arg "BASE=$python" "${PIP_OFFLINE[@]}"
  [ -z "${BUILT[gateway]:-}" ] || check_gateway "$LOCAL/switchyard-gateway:$VERSION"

  build_pause
}

# bin_context NAME TOOL...: a build context holding stripped copies of `make tools` binaries
# (a stripped Kubernetes binary is a third smaller; the images hold nothing to debug with).
bin_context() {
  local dir="$IMAGES/context/$1" tool; shift
  rm -rf "$dir" && mkdir -p "$dir/bin"
  for tool in "$@"; do
    [ "$(cat "$TOOLS/.$tool.version" 2>/dev/null)" = "$(tool_version "$tool")" ] \
      || { log "$TOOLS/$tool $(tool_version "$tool") is missing: run make tools"; exit 1; }
    strip -o "$dir/bin/${tool%-v*}" "$TOOLS/$tool"
  done
  echo "$dir"
}
tool_version() {
  case "$1" in
    coredns) echo "$COREDNS_VERSION" ;;
    etcd-v*) echo "${1#etcd-}" ;;
    *) echo "$K8S_VERSION" ;;
  esac
}

# The kind node image (docs/kind.md): kind-base (systemd, containerd, runc, CNI plugins and
# our own entrypoint, units and containerd config on the Debian base); the images kubeadm
# runs, from the binaries `make tools` builds; kind-node, kind-base with kubeadm, kubelet,
# kubectl, our pod network and those images preloaded; then loaded into podman's storage.
build_kind() {
  build_debian
  build_pause
  local debian="$LOCAL/switchyard-debian:$SUITE" base="$LOCAL/switchyard-kind-base:$SUITE" ctx cmd
  ctx="$(context kind-base images/kind-base)"
  build kind-base "$base" "$ctx/images/kind-base" "$ctx/images/kind-base/Containerfile" \
    "${KEY[debian]}" --build-arg "BASE=$debian"

  local images=(pause)
  for cmd in kube-apiserver kube-controller-manager kube-scheduler; do
    ctx="$(bin_context "kind-$cmd" "$cmd")"
    cp "$REPO/images/kind-images/Containerfile" "$ctx/bin/"
    build "kind-$cmd" "$LOCAL/$cmd:$K8S_VERSION" "$ctx/bin" "$ctx/bin/Containerfile" "" --build-arg "BINARY=$cmd"
    images+=("kind-$cmd")
  done
  ctx="$(bin_context kind-etcd "etcd-v${KUBEADM_ETCD_TAG%-*}")"
  cp "$REPO/images/kind-images/Containerfile" "$ctx/bin/"
  build kind-etcd "$LOCAL/etcd:$KUBEADM_ETCD_TAG" "$ctx/bin" "$ctx/bin/Containerfile" "" --build-arg BINARY=etcd
  ctx="$(bin_context kind-coredns coredns)"
  cp "$REPO/images/kind-images/Containerfile.coredns" "$ctx/bin/"
  build kind-coredns "$LOCAL/coredns:$COREDNS_VERSION" "$ctx/bin" "$ctx/bin/Containerfile.coredns" ""
  ctx="$(bin_context kind-kube-proxy kube-proxy)"
  cp "$REPO/images/kind-images/Containerfile.kube-proxy" "$REPO/images/kind-images/kube-proxy-iptables" "$ctx/bin/"
  build kind-kube-proxy "$LOCAL/kube-proxy:$K8S_VERSION" "$ctx/bin" "$ctx/bin/Containerfile.kube-proxy" \
    "${KEY[debian]}" --build-arg "BASE=$debian"
  images+=(kind-etcd kind-coredns kind-kube-proxy)

  # kind-node: the archives it preloads are mounted into the build, their keys are its inputs.
  ctx="$(bin_context kind-node kubeadm kubelet kubectl)"
  cp -a "$REPO/images/kind-node/Containerfile" "$REPO/images/kind-node/files" "$ctx/"
  local archives="$IMAGES/context/kind-node-archives" name keys=""
  rm -rf "$archives" && mkdir -p "$archives"
  for name in "${images[@]}"; do
    ln "$OCI/$name.tar" "$archives/$name.tar"
    keys="$keys ${KEY[$name]}"
  done
  local node="$LOCAL/switchyard-kind-node:$K8S_VERSION"
  build kind-node "$node" "$ctx" "$ctx/Containerfile" "${KEY[kind-base]}$keys" \
    --build-arg "BASE=$base" --build-arg "K8S_VERSION=$K8S_VERSION" -v "$archives:/archives:ro"
  rm -rf "$archives"
  podman_load kind-node "$node"
}

# podman_load NAME TAG: kind runs nodes from podman's own storage; load the archive there
# unless the image podman has is the one this key built.
podman_load() {
  local name=$1 tag=$2 loaded="$OCI/$1.podman"
  command -v podman >/dev/null || { log "podman is missing: $OCI/$name.tar is not loaded"; return 0; }
  if [ "$(cat "$loaded" 2>/dev/null)" = "$(cat "$OCI/$name.key") $(podman image inspect --format '{{.Id}}' "$tag" 2>/dev/null)" ]; then
    return 0
  fi
  local start old new
  start=$(date +%s.%N)
  old="$(podman image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)"
  podman load -q -i "$OCI/$name.tar" >/dev/null
  new="$(podman image inspect --format '{{.Id}}' "$tag")"
  # The image this one replaces, if no container still runs it.
  [ -z "$old" ] || [ "$old" = "$new" ] || podman rmi "$old" >/dev/null 2>&1 || true
  echo "$(cat "$OCI/$name.key") $new" > "$loaded"
  log "$name: loaded into podman as $tag in $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.0f", b-a}') s"
}

case "${1:-all}" in
  all) build_all ;;
  kind) build_kind ;;
  *) log "usage: hack/build-images.sh [all|kind]"; exit 2 ;;
esac
# vfs keeps every image as a full copy: drop the ones no tag names any more.
"${B[@]}" rmi --prune >/dev/null 2>&1 || true

if [ "$PUSH" = 1 ]; then
  [ "$REGISTRY" != localhost ] || { log "PUSH=1 needs REGISTRY=host/path"; exit 1; }
  digest="$(mktemp)"
  for ref in "switchyard:$VERSION" "switchyard-xcache:$VERSION" "switchyard-dask:$VERSION" \
             "switchyard-gateway:$VERSION" "pause:$PAUSE_VERSION"; do
    log "pushing $REGISTRY/$ref"
    start=$(date +%s.%N)
    "${B[@]}" push --quiet --tls-verify="$PUSH_TLS_VERIFY" --digestfile "$digest" "$LOCAL/$ref" "docker://$REGISTRY/$ref"
    seconds=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
    printf '%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$REGISTRY/$ref" "$(cat "$digest")" "$seconds" >> "$IMAGES/push.tsv"
    printf 'pushed\t%s\t%s\t%ss\n' "$REGISTRY/$ref" "$(cat "$digest")" "$seconds"
  done
  rm -f "$digest"
fi
log "images in $OCI"
