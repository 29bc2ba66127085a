{{/* The name of the Deployment, the ServiceAccount and the RBAC objects. */}}
{{- define "pjeo.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "pjeo.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "pjeo.labels" -}}
{{ include "pjeo.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{/* The namespaces the operator serves, when not all: the list, or the release namespace. */}}
{{- define "pjeo.servedNamespaces" -}}
{{- if .Values.watchNamespaces -}}
{{- .Values.watchNamespaces | uniq | toJson -}}
{{- else -}}
{{- list .Release.Namespace | toJson -}}
{{- end -}}
{{- end -}}

{{/*
The operator's image, which is also the agent image its exporters run by
default: [registry/]repository, then @digest or :tag (the chart's appVersion
when empty).
*/}}
{{- define "pjeo.image" -}}
{{- $repo := .Values.image.repository -}}
{{- with .Values.image.registry }}{{ $repo = printf "%s/%s" (trimSuffix "/" .) $repo }}{{ end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repo .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The ServiceAccount the operator runs as, and the RBAC binds. */}}
{{- define "pjeo.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "pjeo.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* A map of labels in the k=v,k2=v2 form of --pod-monitor-labels, sorted by key. */}}
{{- define "pjeo.labelList" -}}
{{- $out := list -}}
{{- range $k := keys . | sortAlpha }}{{ $out = append $out (printf "%s=%v" $k (get $ $k)) }}{{ end -}}
{{- join "," $out -}}
{{- end -}}

{{/* The strategies switched on, in --strategies form. */}}
{{- define "pjeo.strategies" -}}
{{- $s := list -}}
{{- if .Values.strategies.ephemeralContainer }}{{ $s = append $s "EphemeralContainer" }}{{ end -}}
{{- if .Values.strategies.exec }}{{ $s = append $s "Exec" }}{{ end -}}
{{- join "," $s -}}
{{- end -}}

{{/*
The rules the operator needs in every namespace it serves: the same as
deploy/operator/rbac.yaml's prometheus-jmx-exporter-operator Role, which
names the code behind each (test/deploy proves them and keeps these equal).
*/}}
{{- define "pjeo.servedRules" -}}
- apiGroups: ["jmx.handlerkit.dev"]
  resources: ["prometheusjmxexporters"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["jmx.handlerkit.dev"]
  resources: ["prometheusjmxexporters/status"]
  verbs: ["update"]
{{- if .Values.podMonitors }}
- apiGroups: ["jmx.handlerkit.dev"]
  resources: ["prometheusjmxexporters/finalizers"]
  verbs: ["update"]
{{- end }}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: [""]
  resources: ["pods/log"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- if .Values.podMonitors }}
- apiGroups: ["monitoring.coreos.com"]
  resources: ["podmonitors"]
  verbs: ["get", "list", "watch", "create", "update"]
{{- end }}
{{- end -}}

{{/* The rules the operator needs in its own namespace (deploy/operator/rbac.yaml's -home Role). */}}
{{- define "pjeo.homeRules" -}}
{{- if eq .Values.leaderElection "lease" }}
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "create", "update"]
{{- else if eq .Values.leaderElection "for-life" }}
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "watch", "create", "delete"]
{{- end }}
{{- if ne .Values.metricsService "none" }}
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "create", "update"]
- apiGroups: ["monitoring.coreos.com"]
  resources: ["servicemonitors"]
  verbs: ["get", "create", "update"]
- apiGroups: ["apps"]
  resources: ["replicasets", "deployments"]
  verbs: ["get"]
{{- end }}
{{- if ne .Values.leaderElection "none" }}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "patch"]
{{- else if ne .Values.metricsService "none" }}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get"]
{{- end }}
{{- end -}}

{{/*
The rules of the users' ClusterRoles, aggregated into the built-in ones:
deploy/operator/user-roles's (test/deploy keeps them equal).
*/}}
{{- define "pjeo.viewRules" -}}
- apiGroups: ["jmx.handlerkit.dev"]
  resources: ["prometheusjmxexporters"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["jmx.handlerkit.dev"]
  resources: ["prometheusjmxexporters/status"]
  verbs: ["get"]
{{- end -}}

{{- define "pjeo.editRules" -}}
- apiGroups: ["jmx.handlerkit.dev"]
  resources: ["prometheusjmxexporters"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]
- apiGroups: ["jmx.handlerkit.dev"]
  resources: ["prometheusjmxexporters/status"]
  verbs: ["get"]
{{- end -}}

{{/* Fails the render on values that cannot work. */}}
{{- define "pjeo.validate" -}}
{{- if not (has .Values.leaderElection (list "lease" "for-life" "none")) }}{{ fail "leaderElection: lease, for-life or none" }}{{ end -}}
{{- if and (eq .Values.leaderElection "none") (gt (int .Values.replicas) 1) }}{{ fail "leaderElection none runs exactly one replica; set replicas: 1 or choose lease" }}{{ end -}}
{{- if not (has .Values.metricsService (list "every-replica" "leader" "none")) }}{{ fail "metricsService: every-replica, leader or none" }}{{ end -}}
{{- if and (eq .Values.metricsService "leader") (eq .Values.leaderElection "none") }}{{ fail "metricsService leader needs leader election" }}{{ end -}}
{{- if not (or .Values.strategies.ephemeralContainer .Values.strategies.exec) }}{{ fail "strategies: switch on at least one" }}{{ end -}}
{{- range .Values.agent.allowedImages }}{{ if or (not .) (contains "," .) }}{{ fail "agent.allowedImages: exact image references, none empty or with a comma" }}{{ end }}{{ end -}}
{{- if and .Values.podDisruptionBudget.enabled (not (kindIs "invalid" .Values.podDisruptionBudget.minAvailable)) (not (kindIs "invalid" .Values.podDisruptionBudget.maxUnavailable)) }}{{ fail "podDisruptionBudget: set minAvailable or maxUnavailable, not both" }}{{ end -}}
{{- if and .Values.webhook.enabled (or (lt (int .Values.webhook.timeoutSeconds) 1) (gt (int .Values.webhook.timeoutSeconds) 30)) }}{{ fail "webhook.timeoutSeconds: from 1 to 30 (the API server's limit)" }}{{ end -}}
{{- if not (has .Values.webhook.atStartDelivery (list "image-volume" "init-container")) }}{{ fail "webhook.atStartDelivery: image-volume or init-container" }}{{ end -}}
{{- if and .Values.webhook.certManager.issuerRef (not .Values.webhook.certManager.issuerRef.name) }}{{ fail "webhook.certManager.issuerRef: name the issuer (name, kind, group), or leave it empty for a self-signed one" }}{{ end -}}
{{- range $k, $v := merge (dict) .Values.podMonitor.labels .Values.serviceMonitor.labels }}{{ if or (contains "," $k) (contains "=" $k) (contains "," (toString $v)) }}{{ fail "podMonitor.labels, serviceMonitor.labels: label keys and values cannot hold ',' or '='" }}{{ end }}{{ end -}}
{{- end -}}
