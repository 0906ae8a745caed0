#!/usr/bin/env bash
# Build kube-router's network policy controller for the real-node NetworkPolicy test
# (e2e/test_network_policy_real.py), into the same cache as hack/build-tools.sh.
#
# FOR TESTS ONLY, never shipped or used by the chart: the Go module proxy here serves
# exactly one version of github.com/cloudnativelabs/kube-router/v2 (v2.1.0), and its
# list flags that version for security reports. We run it only inside the test
# harness's network namespaces (firewall only: no router, no service proxy), to have
# a real enforcer of the NetworkPolicies the operator creates; the real nodes' CNI
# (the plain bridge plugin) enforces none.
#
# Opt-in: only the test harness calls it (not `make tools`). Cached by version: a
# rerun with the binary present builds nothing. Prints the binary's path.
set -euo pipefail

KUBE_ROUTER_VERSION=v2.1.0
CACHE="${SWITCHYARD_CACHE:-$HOME/.cache/switchyard}"
BIN="$CACHE/bin"
mkdir -p "$BIN"
export GOFLAGS="${GOFLAGS:--trimpath}" CGO_ENABLED=0

exec 9>"$CACHE/.build-kube-router.lock"
flock 9
if [ -x "$BIN/kube-router" ] && [ "$(cat "$BIN/.kube-router.version" 2>/dev/null)" = "$KUBE_ROUTER_VERSION" ]; then
  echo "$BIN/kube-router"
  exit 0
fi
printf '[build-kube-router] building kube-router %s (tests only)\n' "$KUBE_ROUTER_VERSION" >&2
started=$(date +%s)
# Without the version ldflag `kube-router --version` reports "version , built on".
GOBIN="$BIN" go install -ldflags "-X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$KUBE_ROUTER_VERSION" \
  "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$KUBE_ROUTER_VERSION"
echo "$KUBE_ROUTER_VERSION" > "$BIN/.kube-router.version"
printf '[build-kube-router] built in %d s\n' "$(( $(date +%s) - started ))" >&2
echo "$BIN/kube-router"
