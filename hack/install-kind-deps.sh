#!/usr/bin/env bash
# What `make e2e-kind` needs besides `make realnode-deps` (docs/kind.md): podman (kind's podman
# provider) and the CNI dnsname plugin, without which kind's worker nodes cannot resolve the
# control-plane's name on the podman network (Debian's podman 4.3 uses CNI, not netavark), and
# /lib/modules, which kind always mounts into its nodes (absent on hosts that boot no modules).
set -euo pipefail
. "$(dirname "$0")/apt-install.sh"

apt_install podman golang-github-containernetworking-plugin-dnsname
[ -d /lib/modules ] || mkdir -p /lib/modules
echo "podman $(podman --version | awk '{print $3}')"
