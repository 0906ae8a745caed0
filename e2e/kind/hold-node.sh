#!/usr/bin/env bash
# The join flake on demand (docs/kind.md, "The join timeout"): during a kind create, the API server
# refuses NODE's Node object until SECONDS after its kubelet got its client certificate, as on a
# machine too loaded for the kubelet to register in time. Run beside the create:
#   bash e2e/kind/hold-node.sh switchyard-worker4 75 & make e2e-kind
# Without cluster.yaml's kubeadm timeouts patch the create fails at 60 s with kubeadm's
# "error uploading crisocket: nodes "switchyard-worker4" not found"; with it, the join waits.
set -euo pipefail
node=$1 hold=$2 cp=switchyard-control-plane
admin() { podman exec -i "$cp" kubectl --kubeconfig /etc/kubernetes/admin.conf "$@"; }
log() { printf '[hold-node] %s %s\n' "$(date +%T)" "$*" >&2; }
wait_for() { local i; for i in $(seq 1200); do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done; log "gave up waiting: $*"; exit 1; }

wait_for admin get --raw /readyz
admin apply -f - >/dev/null <<YAML
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: hold-node}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["nodes"]}
  validations:
    - {expression: "object.metadata.name != '$node'", message: "held by e2e/kind/hold-node.sh"}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: hold-node}
spec: {policyName: hold-node, validationActions: [Deny]}
YAML
log "refusing the Node $node"
wait_for podman exec "$node" test -e /var/lib/kubelet/pki/kubelet-client-current.pem
log "$node has its client certificate: holding its Node for $hold s"
sleep "$hold"
admin delete validatingadmissionpolicybinding,validatingadmissionpolicy hold-node >/dev/null
log "released"
