#!/usr/bin/env bash
# System packages the integration tests use for real. Idempotent.
set -euo pipefail
here="$(dirname "$0")"
bash "$here/install-xrootd.sh"
bash "$here/build-minio.sh" >/dev/null
# The emulated switch fabric (e2e/test_fabric.py, make bench-fabric): ip netns,
# bridges, veth and tc HTB from iproute2; setpriv (util-linux) drops xrootd to its user;
# iptables counts what each cache of the routing tests' ring sent (routing_rig.KernelMeter).
# shellcheck source=hack/apt-install.sh
. "$here/apt-install.sh"
apt_install iproute2 util-linux iptables
