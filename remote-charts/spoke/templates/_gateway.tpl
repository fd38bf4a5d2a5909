{{- /*
  spoke.gateway renders one gateway (see gateways.yaml) from a dict: root
  (the chart's top scope), gw (a gateways[] entry) and credentials
  (whether the hub may read the Secrets of its namespace).
*/ -}}
{{- define "spoke.gateway" }}
{{- $root := .root }}
{{- $gw := .gw }}
{{- $ns := $gw.namespace | default $root.Release.Namespace }}
{{- $labels := $gw.labels | default (dict "istio" $gw.name) }}
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ $gw.name }}
  namespace: {{ $ns }}
  labels:
    {{- include "spoke.labels" $root | nindent 4 }}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $gw.name }}
  namespace: {{ $ns }}
  labels:
    {{- include "spoke.labels" $root | nindent 4 }}
spec:
  replicas: {{ $gw.replicas | default 1 }}
  selector:
    matchLabels:
      {{- toYaml $labels | nindent 6 }}
  template:
    metadata:
      annotations:
        inject.istio.io/templates: gateway
        prometheus.io/scrape: "true"
        prometheus.io/port: "15020"
        prometheus.io/path: /stats/prometheus
      labels:
        {{- toYaml $labels | nindent 8 }}
        sidecar.istio.io/inject: "true"
    spec:
      serviceAccountName: {{ $gw.name }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
      - name: istio-proxy
        # Replaced by the injector's gateway template (Istio's convention).
        image: auto
        {{- with $gw.resources }}
        resources:
          {{- toYaml . | nindent 10 }}
        {{- end }}
        ports:
        {{- range $p := ($gw.service).ports }}
        - name: {{ $p.name }}
          containerPort: {{ $p.targetPort | default $p.port }}
          protocol: TCP
        {{- end }}
        - name: http-envoy-prom
          containerPort: 15090
          protocol: TCP
---
apiVersion: v1
kind: Service
metadata:
  name: {{ $gw.name }}
  namespace: {{ $ns }}
  labels:
    {{- include "spoke.labels" $root | nindent 4 }}
    {{- toYaml $labels | nindent 4 }}
  {{- with ($gw.service).annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  type: {{ ($gw.service).type | default "LoadBalancer" }}
  selector:
    {{- toYaml $labels | nindent 4 }}
  ports:
  {{- range $p := ($gw.service).ports }}
  - name: {{ $p.name }}
    port: {{ $p.port }}
    targetPort: {{ $p.targetPort | default $p.port }}
    protocol: TCP
  {{- end }}
{{- if and .credentials $root.Values.reader.enabled }}
---
# The hub reads this gateway's credentialName Secrets (in this namespace
# only) with the reader its remote secret uses.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $gw.name }}-credentials
  namespace: {{ $ns }}
  labels:
    {{- include "spoke.labels" $root | nindent 4 }}
rules:
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $gw.name }}-credentials
  namespace: {{ $ns }}
  labels:
    {{- include "spoke.labels" $root | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $gw.name }}-credentials
subjects:
- kind: ServiceAccount
  name: {{ $root.Values.reader.name }}
  namespace: {{ $root.Release.Namespace }}
{{- end }}
{{- end }}
