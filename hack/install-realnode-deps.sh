#!/usr/bin/env bash
# Debian packages the real-node e2e and `make images` need: buildah and
# debootstrap (images without a Docker engine), containerd and runc (one
# containerd per real node), the CNI plugins (bridge, host-local, portmap in
# /usr/lib/cni), iproute2 (network namespaces, bridges, veths), iptables and
# conntrack (kube-proxy), ipset (kube-router's network policy controller, which
# e2e/test_network_policy_real.py runs on the real nodes; tests only), gcc (the static
# pause binary).
# Idempotent: `apt-get update` runs once, and only when something is missing.
set -euo pipefail
# shellcheck source=hack/apt-install.sh
. "$(dirname "$0")/apt-install.sh"

PACKAGES=(
  buildah debootstrap
  containerd runc containernetworking-plugins
  iproute2 iptables conntrack
  ipset        # kube-router's policy controller (tests only: hack/build-kube-router.sh)
  gcc libc6-dev
  util-linux   # nsenter, unshare
  python3-pip  # `pip download` of the images' wheels on the host
)

apt_install "${PACKAGES[@]}"
# Debian starts the packaged containerd as a service where systemd runs; the real
# nodes run their own, one per node, and never use the system one.
echo "containerd $(containerd --version | awk '{print $3}'), runc $(runc --version | head -n1 | awk '{print $3}'), buildah $(buildah --version | awk '{print $3}')"
