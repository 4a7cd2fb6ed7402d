{{/*
The labels of every object: deploy/'s (app.kubernetes.io/part-of), and Helm's, which tell which
release made it.
*/}}
{{- define "baton.labels" -}}
app.kubernetes.io/part-of: baton
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/*
The groups' namespace: required, and not baton's own. In one namespace, whoever may create pods
beside the groups could run as baton's service accounts and read its certificate
(docs/security.md, "Layout").
*/}}
{{- define "baton.groupsNamespace" -}}
{{- if .Values.clusterWide.enabled -}}
{{- /* No one groups' namespace: `namespace` names baton's own, whose webhook configurations the
controller injects its CA into (deploy/cluster-wide). */ -}}
{{- .Release.Namespace -}}
{{- else -}}
{{- $groups := required "groupsNamespace names the namespace of the rollout groups baton coordinates" .Values.groupsNamespace -}}
{{- if eq $groups .Release.Namespace -}}
{{- fail (printf "groupsNamespace %q is the release namespace: install baton into a namespace of its own (docs/security.md, \"Layout\")" $groups) -}}
{{- end -}}
{{- $groups -}}
{{- end -}}
{{- end }}

{{- define "baton.image" -}}
{{- $image := .Values.image.repository -}}
{{- with .Values.image.registry }}{{ $image = printf "%s/%s" . $image }}{{ end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $image .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $image (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end }}

{{/* The configuration file, with the client CA's path when one is mounted. */}}
{{- define "baton.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- if .Values.clusterWide.enabled -}}
{{- $selector := .Values.clusterWide.namespaceSelector -}}
{{- $served := dict -}}
{{- with $selector.matchLabels }}{{ $_ := set $served "match_labels" . }}{{ end -}}
{{- with $selector.matchExpressions }}{{ $_ := set $served "match_expressions" . }}{{ end -}}
{{- $_ := set $config "namespaces" (list "*") -}}
{{- $_ := set $config "namespace_selector" $served -}}
{{- end -}}
{{- if .Values.webhook.clientCAConfigMap -}}
{{- $_ := set $config "webhook" (merge (dict "client_ca_file" "/var/run/baton/client-ca/ca.crt") ($config.webhook | default dict)) -}}
{{- end -}}
{{- toYaml $config -}}
{{- end }}

{{/*
What both Deployments' pods share: image, environment, security contexts, scheduling. Called with
(dict "root" $ "binary" "controller"|"webhook").
*/}}
{{- define "baton.podCommon" -}}
{{- $root := .root -}}
serviceAccountName: baton-{{ .binary }}
enableServiceLinks: false
{{- with $root.Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
terminationGracePeriodSeconds: 30
{{- with $root.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "baton.containerCommon" -}}
{{- $root := .root -}}
image: {{ include "baton.image" $root }}
{{- with $root.Values.image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
command: [/usr/local/bin/baton-{{ .binary }}]
{{- with $root.Values.extraArgs }}
args:
  {{- toYaml . | nindent 2 }}
{{- end }}
env:
  - name: BATON_CONFIG
    value: /etc/baton/config.yaml
  # The groups' namespace; baton's own objects are in the pod's.
  - name: BATON_NAMESPACE
    valueFrom:
      configMapKeyRef:
        name: baton-config
        key: groups-namespace
  - name: BATON_SYSTEM_NAMESPACE
    valueFrom:
      fieldRef:
        fieldPath: metadata.namespace
  {{- with $root.Values.extraEnv }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with $root.Values.extraEnvFrom }}
envFrom:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.securityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* A pod template's metadata. */}}
{{- define "baton.podMetadata" -}}
{{- $root := .root -}}
labels:
  app.kubernetes.io/name: baton-{{ .binary }}
  app.kubernetes.io/part-of: baton
  {{- with $root.Values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
annotations:
  # A changed configuration rolls the pods (they read it once, at start).
  checksum/config: {{ include "baton.config" $root | sha256sum }}
  {{- with $root.Values.podAnnotations }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{/*
What every webhook of baton's shares: the Service in baton's namespace, the policies and the
groups' namespace. Called with (dict "root" $ "name" "no-downscale" "path" "no-downscale");
a "failurePolicy" in the dict overrides webhooks.failurePolicy (the guards always fail closed).
*/}}
{{- define "baton.webhookCommon" -}}
{{- $root := .root -}}
name: {{ .name }}.baton.grafana.com
admissionReviewVersions: [v1, v1beta1]
clientConfig:
  service:
    name: baton-webhook
    namespace: {{ $root.Release.Namespace }}
    path: /admission/{{ .path }}
    port: 443
failurePolicy: {{ .failurePolicy | default $root.Values.webhooks.failurePolicy }}
matchPolicy: Equivalent
timeoutSeconds: {{ int $root.Values.webhooks.timeoutSeconds }}
namespaceSelector:
{{- if $root.Values.clusterWide.enabled }}
  {{- toYaml $root.Values.clusterWide.namespaceSelector | nindent 2 }}
{{- else }}
  matchLabels:
    kubernetes.io/metadata.name: {{ include "baton.groupsNamespace" $root }}
{{- end }}
{{- end }}

{{/* A webhook configuration's metadata. */}}
{{- define "baton.webhookConfigurationMetadata" -}}
{{- $root := .root -}}
name: {{ .name }}
labels:
  {{- include "baton.labels" $root | nindent 2 }}
  grafana.com/inject-rollout-operator-ca: "true"
  grafana.com/namespace: {{ include "baton.groupsNamespace" $root }}
{{- end }}
