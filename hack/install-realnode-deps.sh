#!/usr/bin/env bash
# Debian packages the real-node e2e and `make images` need: buildah and
# debootstrap (images without a Docker engine), containerd and runc (one
# containerd per real node), the CNI plugins (bridge, host-local, portmap in
# /usr/lib/cni), iproute2 (network namespaces, bridges, veths), iptables and
# conntrack (kube-proxy), gcc (the static pause binary).
# Idempotent: `apt-get update` runs once, and only when something is missing.
set -euo pipefail

PACKAGES=(
  buildah debootstrap
  containerd runc containernetworking-plugins
  iproute2 iptables conntrack
  gcc libc6-dev
  util-linux   # nsenter, unshare
  python3-pip  # `pip download` of the images' wheels on the host
)

SUDO=()
if [ "$(id -u)" -ne 0 ]; then SUDO=(sudo); fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
if [ "${#missing[@]}" -gt 0 ]; then
  # Another apt run (e.g. hack/install-xrootd.sh in a parallel job) may hold the lock.
  "${SUDO[@]}" apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
    --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian starts the packaged containerd as a service where systemd runs; the real
# nodes run their own, one per node, and never use the system one.
echo "containerd $(containerd --version | awk '{print $3}'), runc $(runc --version | head -n1 | awk '{print $3}'), buildah $(buildah --version | awk '{print $3}')"
