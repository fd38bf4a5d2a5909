{{/* The base name of the chart's objects. */}}
{{- define "hub.name" -}}
{{- default "meshfed-hub" .Values.nameOverride | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{- define "hub.labels" -}}
app.kubernetes.io/name: {{ include "hub.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: meshfed
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "hub.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hub.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Namespace of the remote secrets and CA Secrets. */}}
{{- define "hub.secretNamespace" -}}
{{- default .Release.Namespace .Values.remoteSecretNamespace -}}
{{- end -}}

{{/* The headless Service gossip seeds resolve through. */}}
{{- define "hub.gossipService" -}}
{{- printf "%s-gossip" (include "hub.name" .) -}}
{{- end -}}
