#!/usr/bin/env bash
# Installs what the xrootd and exporter integration tests run against: real
# XRootD 5 (server, client, server plugins incl. XrdPfc/XrdPss, SciTokens),
# Prometheus, and the unprivileged user xrootd runs as (it refuses root).
# Idempotent: safe to call on every CI run.
set -euo pipefail
# shellcheck source=hack/apt-install.sh
. "$(dirname "$0")/apt-install.sh"

PACKAGES=(
  xrootd-server            # xrootd, cmsd daemons
  xrootd-client            # xrdcp, xrdfs
  xrootd-plugins           # client/server plugins shipped separately on Debian
  xrootd-server-plugins    # libXrdPss, libXrdPfc (the caching proxy)
  xrootd-scitokens-plugins # libXrdAccSciTokens, for auth.mode=scitokens
  prometheus               # scrapes the exporter in tests
  gdb                      # the thread stacks of a test's xrootd that stops reporting (xrootd_fixtures.py)
)
XROOTD_USER="${XROOTD_USER:-xrootd}"

SUDO=()
if [ "$(id -u)" -ne 0 ]; then SUDO=(sudo); fi

apt_install "${PACKAGES[@]}"

if ! id -u "$XROOTD_USER" >/dev/null 2>&1; then
  "${SUDO[@]}" useradd --system --user-group --no-create-home --shell /usr/sbin/nologin "$XROOTD_USER"
fi

echo "xrootd $(xrootd -v 2>&1 | head -n1), prometheus $(prometheus --version 2>&1 | head -n1 | awk '{print $3}'), user $XROOTD_USER"
