{{/* The base name of the chart's objects. */}}
{{- define "spoke.name" -}}
{{- default "meshfed-spoke" .Values.nameOverride | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "spoke.labels" -}}
app.kubernetes.io/name: {{ include "spoke.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: meshfed
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Labels that select the webhook Pods. */}}
{{- define "spoke.selectorLabels" -}}
app.kubernetes.io/name: {{ include "spoke.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Cluster-scoped objects carry the namespace, so that two installations
     in two namespaces do not collide. */}}
{{- define "spoke.clusterName" -}}
{{- printf "%s-%s" (include "spoke.name" .) .Release.Namespace | trunc 253 -}}
{{- end -}}

{{- define "spoke.injectorName" -}}
{{- printf "%s-injector-%s" (include "spoke.name" .) .Release.Namespace | trunc 253 -}}
{{- end -}}

{{- define "spoke.validatorName" -}}
{{- printf "%s-validator-%s" (include "spoke.name" .) .Release.Namespace | trunc 253 -}}
{{- end -}}

{{- define "spoke.readerClusterRole" -}}
{{- printf "%s-%s" .Values.reader.name .Release.Namespace | trunc 253 -}}
{{- end -}}

{{/* The hub's CA address: hub.caAddress, or the discovery host on 15012. */}}
{{- define "spoke.caAddress" -}}
{{- if .Values.hub.caAddress -}}
{{- .Values.hub.caAddress -}}
{{- else -}}
{{- regexReplaceAll ":[0-9]+$" .Values.hub.discoveryAddress "" }}:15012
{{- end -}}
{{- end -}}

{{/* clientConfig of a webhook; call with (dict "path" "/inject" "root" $). */}}
{{- define "spoke.clientConfig" -}}
{{- $v := .root.Values.webhook -}}
{{- if $v.url }}
url: {{ printf "%s%s" (trimSuffix "/" $v.url) .path | quote }}
{{- else }}
service:
  name: {{ include "spoke.name" .root }}
  namespace: {{ .root.Release.Namespace }}
  path: {{ .path | quote }}
  port: 443
{{- end }}
{{- with $v.caBundle }}
caBundle: {{ . | quote }}
{{- end }}
{{- end -}}

{{/* Annotations of the webhook configurations. */}}
{{- define "spoke.webhookAnnotations" -}}
{{- with .Values.webhook.certManagerInjectFrom }}
annotations:
  cert-manager.io/inject-ca-from: {{ . | quote }}
{{- end }}
{{- end -}}
