{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "switchyard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-qualified name of every object the chart creates. */}}
{{- define "switchyard.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Selector labels: stable across upgrades. */}}
{{- define "switchyard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "switchyard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* Labels on every object the chart creates. */}}
{{- define "switchyard.labels" -}}
{{ include "switchyard.selectorLabels" . }}
app.kubernetes.io/part-of: switchyard
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "switchyard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "switchyard.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "switchyard.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Namespaces the operator watches in namespaced mode (the release namespace by default). */}}
{{- define "switchyard.watchNamespaces" -}}
{{- if .Values.watch.namespaces }}
{{- .Values.watch.namespaces | uniq | sortAlpha | join "," }}
{{- else }}
{{- .Release.Namespace }}
{{- end }}
{{- end }}

{{/*
Rules for the namespaced objects the operator reads and writes: used by the
ClusterRole in cluster mode and by one Role per watched namespace otherwise.
Every verb is one the operator calls (see switchyard/apply.py and handlers/).
*/}}
{{- define "switchyard.namespacedRules" -}}
# switchyard's own kinds: watched by kopf (list, watch; kopf keeps its progress in
# annotations: patch); children the facility owns are server-side applied (patch;
# create too, when the apply creates the object), listed by owner to prune (delete),
# and every reconcile re-reads its own object before writing children (get).
- apiGroups: [switchyard.dev]
  resources: [analysisfacilities, xcachepools, workerfleets, s3stagings, cacheprestages]
  verbs: [get, list, watch, create, patch, delete]
# Conditions and plan summaries are server-side applied to the status subresource
# (a patch; the status is never read back from there).
- apiGroups: [switchyard.dev]
  resources: [analysisfacilities/status, xcachepools/status, workerfleets/status, s3stagings/status,
              cacheprestages/status]
  verbs: [patch]
# Per-switch workloads: applied (create, patch), listed to prune (delete), and
# indexed by kopf (watch). Never read one by one: no get.
- apiGroups: [apps]
  resources: [statefulsets, deployments]
  verbs: [list, watch, create, patch, delete]
# A CachePrestage's Job: applied, listed (to prune, and for its Complete or Failed
# condition), deleted when the prestage's spec makes another. Never read one by one.
- apiGroups: [batch]
  resources: [jobs]
  verbs: [list, create, patch, delete]
# Rendered xrootd configs, cache Services and PodDisruptionBudgets: applied, listed to prune.
- apiGroups: [""]
  resources: [configmaps, services]
  verbs: [list, create, patch, delete]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [list, create, patch, delete]
# NetworkPolicies of the Dask schedulers and embedded MinIOs: applied, listed to prune
# (pruned all at once when networkPolicies.enabled is off).
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [list, create, patch, delete]
# Pods whose node moved to another switch are deleted so their controller
# recreates them where the plan puts them; the cache pods are watched (kopf index)
# so a host not Ready leaves the published hash ring at once.
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch, delete]
# Events on switchyard objects (Created, Ready, reasons).
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- if .Values.rbac.s3StagingSecrets }}
# S3Staging: reads the credentials Secrets a staging area names (get), and applies
# (create, patch) and prunes (list by owner label, delete) the root and consumer
# Secrets it owns. Never watch: the operator holds no cache of Secrets.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list, create, patch, delete]
{{- end }}
{{- end }}

{{/* Cluster-scoped reads every mode needs. */}}
{{- define "switchyard.clusterRules" -}}
# Nodes are cluster-scoped: the placement reads their switch label, NVMe label,
# NIC annotation and allocatable resources (a kopf index: list, watch).
- apiGroups: [""]
  resources: [nodes]
  verbs: [list, watch]
# kopf follows CustomResourceDefinitions to learn when its resources are served.
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [list, watch]
# kopf follows namespaces as they come and go, in namespaced mode too (refused, it
# retries for about a minute at every start before falling back to the list it got).
- apiGroups: [""]
  resources: [namespaces]
  verbs: [list, watch]
# The pod address ranges network plugins with an IPAM of their own give each node
# (Calico's blocks, Cilium's cluster-pool CIDRs), for the cache pools' client maps:
# listed every two minutes (no watch: not kopf indexes), a 404 where not installed.
- apiGroups: [crd.projectcalico.org]
  resources: [blockaffinities]
  verbs: [list]
- apiGroups: [cilium.io]
  resources: [ciliumnodes]
  verbs: [list]
{{- end }}

{{/* The optional dask-gateway's selector labels (component dask-gateway, never the operator's). */}}
{{- define "switchyard.gatewaySelectorLabels" -}}
app.kubernetes.io/name: {{ include "switchyard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: dask-gateway
{{- end }}

{{- define "switchyard.gatewayLabels" -}}
{{ include "switchyard.gatewaySelectorLabels" . }}
app.kubernetes.io/part-of: switchyard
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}
