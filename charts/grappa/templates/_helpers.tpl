{{/* nameOverride replaces "grappa" in names and the app.kubernetes.io/name label. */}}
{{- define "grappa.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Base of every object name; fullnameOverride replaces it whole. Defaults as before the
     overrides existed (tests/e2e/helpers.py Release.fullname mirrors them). */}}
{{- define "grappa.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "grappa.name" . -}}
{{- if contains $name .Release.Name -}}
{{- printf "%s-operator" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s-operator" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* fullname plus a suffix, still within the 63-character name limit. */}}
{{- define "grappa.suffixed" -}}
{{- $full := include "grappa.fullname" (index . 0) -}}
{{- $suffix := index . 1 -}}
{{- printf "%s-%s" ($full | trunc (int (sub 62 (len $suffix))) | trimSuffix "-") $suffix -}}
{{- end -}}

{{- define "grappa.labels" -}}
app.kubernetes.io/name: {{ include "grappa.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "grappa.selectorLabels" -}}
app.kubernetes.io/name: {{ include "grappa.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "grappa.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "grappa.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Rules the operator needs in every namespace it watches. No wildcards, no secrets. */}}
{{- define "grappa.rules" -}}
- apiGroups: ["grappa.dev"]
  resources: ["grappajobs"]
  verbs: ["get", "list", "watch", "patch", "delete"]
- apiGroups: ["grappa.dev"]
  resources: ["grappajobs/status"]
  verbs: ["get", "patch"]
- apiGroups: ["grappa.dev"]
  resources: ["grappajobs/finalizers"]
  verbs: ["update"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "delete"]
- apiGroups: [""]
  resources: ["services", "serviceaccounts"]
  verbs: ["create"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["create"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- if .Values.kueue.enabled }}
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["get", "create", "patch"]
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads/status"]
  verbs: ["patch"]
{{- end }}
{{- if .Values.gangScheduling.volcano }}
- apiGroups: ["scheduling.volcano.sh"]
  resources: ["podgroups"]
  verbs: ["create"]
{{- end }}
{{- if .Values.gangScheduling.schedulerPlugins }}
- apiGroups: ["scheduling.x-k8s.io"]
  resources: ["podgroups"]
  verbs: ["create"]
{{- end }}
{{- end -}}

{{/* The images: a repository set in full wins, else <imageRegistry>/grappa-<name>; tag: appVersion. */}}
{{- define "grappa.operatorImage" -}}
{{- $repo := .Values.image.repository | default (printf "%s/grappa-operator" .Values.imageRegistry) -}}
{{- printf "%s:%s" $repo (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "grappa.trainerImage" -}}
{{- $repo := .Values.trainerImage.repository | default (printf "%s/grappa-trainer" .Values.imageRegistry) -}}
{{- printf "%s:%s" $repo (.Values.trainerImage.tag | default .Chart.AppVersion) -}}
{{- end -}}
