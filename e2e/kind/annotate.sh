#!/usr/bin/env bash
# Give kind's worker nodes the NIC speed annotation switchyard plans with.
set -euo pipefail
gbps="${1:-25}"
for node in $(kubectl get nodes -l switchyard.dev/switch -o name); do
  kubectl annotate --overwrite "$node" "switchyard.dev/nic-gbps=$gbps"
done
