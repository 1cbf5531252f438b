{{/* ------------------------------------------------------------ names (spec/deploy.md §2.2) */}}

{{- define "local-ccm.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "local-ccm.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "local-ccm.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* <fullname>-<suffix>, at most 63 characters. */}}
{{- define "local-ccm.suffixed" -}}
{{- $full := include "local-ccm.fullname" .root -}}
{{- printf "%s-%s" ($full | trunc (int (sub 62 (len .suffix)))) .suffix | trimPrefix "-" -}}
{{- end -}}

{{- define "local-ccm.agent.name" -}}
{{- include "local-ccm.fullname" . -}}
{{- end -}}

{{/* The static manifests keep the original's names (§4). */}}
{{- define "local-ccm.nlc.name" -}}
{{- if .Values.staticManifests -}}
node-lifecycle-controller
{{- else -}}
{{- include "local-ccm.suffixed" (dict "root" . "suffix" "node-lifecycle-controller") -}}
{{- end -}}
{{- end -}}

{{- define "local-ccm.ipam.name" -}}
{{- if .Values.staticManifests -}}
node-ipam-controller
{{- else -}}
{{- include "local-ccm.suffixed" (dict "root" . "suffix" "node-ipam-controller") -}}
{{- end -}}
{{- end -}}

{{- define "local-ccm.agent.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default "local-ccm" -}}
{{- end -}}

{{- define "local-ccm.nlc.serviceAccountName" -}}
{{- .Values.nodeLifecycleController.serviceAccount.name | default (include "local-ccm.nlc.name" .) -}}
{{- end -}}

{{- define "local-ccm.ipam.serviceAccountName" -}}
{{- .Values.nodeIpamController.serviceAccount.name | default (include "local-ccm.ipam.name" .) -}}
{{- end -}}

{{- define "local-ccm.agent.clusterRoleName" -}}
{{- $default := ternary "system:local-ccm" (include "local-ccm.agent.name" .) .Values.staticManifests -}}
{{- .Values.rbac.clusterRoleNames.agent | default $default -}}
{{- end -}}

{{- define "local-ccm.nlc.clusterRoleName" -}}
{{- $default := ternary "system:node-lifecycle-controller" (include "local-ccm.nlc.name" .) .Values.staticManifests -}}
{{- .Values.rbac.clusterRoleNames.lifecycle | default $default -}}
{{- end -}}

{{- define "local-ccm.ipam.clusterRoleName" -}}
{{- $default := ternary "system:node-ipam-controller" (include "local-ccm.ipam.name" .) .Values.staticManifests -}}
{{- .Values.rbac.clusterRoleNames.ipam | default $default -}}
{{- end -}}

{{/* ------------------------------------------------------------ labels */}}

{{/* Common labels on every object; the static manifests drop the Helm-only ones. */}}
{{- define "local-ccm.labels" -}}
app.kubernetes.io/name: {{ include "local-ccm.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ include "local-ccm.imageTag" (dict "root" . "image" dict) | quote }}
app.kubernetes.io/part-of: local-ccm
{{- if not .Values.staticManifests }}
helm.sh/chart: {{ include "local-ccm.chart" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}
{{- with .Values.labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* [compat, immutable] the original chart's DaemonSet selector; `app: local-ccm` alone in
     the original's static manifests. */}}
{{- define "local-ccm.agent.selectorLabels" -}}
{{- if not .Values.staticManifests }}
app.kubernetes.io/name: {{ include "local-ccm.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
app: local-ccm
{{- if not .Values.staticManifests }}
component: node-controller
{{- end }}
{{- end -}}

{{/* [fix] NLC and IPAM pods never carry the agent's selector labels. */}}
{{- define "local-ccm.component.selectorLabels" -}}
{{- if .root.Values.staticManifests }}
app: {{ .component }}
{{- else }}
app.kubernetes.io/name: {{ include "local-ccm.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- end -}}

{{- define "local-ccm.nlc.selectorLabels" -}}
{{- include "local-ccm.component.selectorLabels" (dict "root" . "component" "node-lifecycle-controller") -}}
{{- end -}}

{{- define "local-ccm.ipam.selectorLabels" -}}
{{- include "local-ccm.component.selectorLabels" (dict "root" . "component" "node-ipam-controller") -}}
{{- end -}}

{{/* Pod labels: selector labels, exactly one app.kubernetes.io/component, extra labels. */}}
{{- define "local-ccm.podLabels" -}}
{{- $labels := merge (dict) (.selector | fromYaml) -}}
{{- $_ := set $labels "app.kubernetes.io/component" .component -}}
{{- $_ := set $labels "app.kubernetes.io/name" (include "local-ccm.name" .root) -}}
{{- $_ := set $labels "app.kubernetes.io/instance" .root.Release.Name -}}
{{- $_ := set $labels "app.kubernetes.io/part-of" "local-ccm" -}}
{{- $labels = merge $labels (.podLabels | default dict) (.root.Values.labels | default dict) -}}
{{- toYaml $labels -}}
{{- end -}}

{{/* ------------------------------------------------------------ images (§1.2) */}}

{{- define "local-ccm.imageTag" -}}
{{- .image.tag | default .root.Values.image.tag | default .root.Chart.AppVersion -}}
{{- end -}}

{{/* One image for all components unless a component overrides it. */}}
{{- define "local-ccm.image" -}}
{{- $repo := .image.repository | default .root.Values.image.repository -}}
{{- printf "%s:%s" $repo (include "local-ccm.imageTag" .) -}}
{{- end -}}

{{- define "local-ccm.pullPolicy" -}}
{{- .image.pullPolicy | default .root.Values.image.pullPolicy -}}
{{- end -}}

{{/* ------------------------------------------------------------ shared pod parts */}}

{{/* §6: a direct API endpoint; declared env wins over the kubelet-injected variables. */}}
{{- define "local-ccm.apiServerEnv" -}}
{{- if .Values.apiServer.host }}
- name: KUBERNETES_SERVICE_HOST
  value: {{ .Values.apiServer.host | quote }}
- name: KUBERNETES_SERVICE_PORT
  value: {{ .Values.apiServer.port | toString | quote }}
{{- end }}
{{- end -}}

{{- define "local-ccm.fieldEnv" -}}
- name: {{ .name }}
  valueFrom:
    fieldRef:
      fieldPath: {{ .path }}
{{- end -}}

{{/* Health probes of a container; hostNetwork pods probe 127.0.0.1 (§3.1 item 6). */}}
{{- define "local-ccm.probes" -}}
startupProbe:
  httpGet:
    {{- if .loopback }}
    host: 127.0.0.1
    {{- end }}
    path: /healthz
    port: {{ .port }}
  periodSeconds: 2
  failureThreshold: 30
livenessProbe:
  httpGet:
    {{- if .loopback }}
    host: 127.0.0.1
    {{- end }}
    path: /healthz
    port: {{ .port }}
  periodSeconds: 10
  timeoutSeconds: 2
  failureThreshold: 3
readinessProbe:
  httpGet:
    {{- if .loopback }}
    host: 127.0.0.1
    {{- end }}
    path: /readyz
    port: {{ .port }}
  periodSeconds: 10
  timeoutSeconds: 2
  failureThreshold: 3
{{- end -}}

{{/* Preferred control-plane Nodes [compat] and preferred spreading over hosts [beyond]. */}}
{{- define "local-ccm.controllerAffinity" -}}
nodeAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      preference:
        matchExpressions:
          - key: node-role.kubernetes.io/control-plane
            operator: Exists
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- .selector | nindent 12 }}
{{- end -}}

{{/* ------------------------------------------------------------ §5.5 pod security */}}

{{/* "true" when the NLC needs raw ICMP sockets, hence uid 0 and NET_RAW. */}}
{{- define "local-ccm.nlc.rawICMP" -}}
{{- $c := .Values.nodeLifecycleController.controller -}}
{{- $icmp := has "icmp" (splitList "," ($c.probe | nospace)) -}}
{{- if and $icmp (gt (int $c.pingCount) 0) (has $c.icmpMode (list "raw" "auto")) -}}
true
{{- end -}}
{{- end -}}

{{- define "local-ccm.nlc.podSecurityContext" -}}
{{- $v := .Values.nodeLifecycleController -}}
{{- if $v.podSecurityContext -}}
{{- toYaml $v.podSecurityContext -}}
{{- else if include "local-ccm.nlc.rawICMP" . -}}
runAsNonRoot: false
runAsUser: 0
runAsGroup: 0
seccompProfile:
  type: RuntimeDefault
{{- else -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- if not $v.hostNetwork }}
# Unprivileged ICMP datagram sockets for every group; a safe sysctl.
sysctls:
  - name: net.ipv4.ping_group_range
    value: "0 2147483647"
{{- end }}
{{- end -}}
{{- end -}}

{{- define "local-ccm.nlc.securityContext" -}}
{{- $v := .Values.nodeLifecycleController -}}
{{- if $v.securityContext -}}
{{- toYaml $v.securityContext -}}
{{- else -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
  {{- if include "local-ccm.nlc.rawICMP" . }}
  add: [NET_RAW]
  {{- end }}
{{- end -}}
{{- end -}}

{{/* [compat] values copied from the original run the agent as root: keep the pod consistent. */}}
{{- define "local-ccm.agent.root" -}}
{{- $sc := .Values.securityContext | default dict -}}
{{- if and (hasKey $sc "runAsUser") (eq (toString $sc.runAsUser) "0") -}}
true
{{- end -}}
{{- end -}}

{{/* ------------------------------------------------------------ checks */}}

{{- define "local-ccm.validate" -}}
{{- if and .Values.admissionPolicy.enabled (not (semverCompare ">=1.30.0-0" .Capabilities.KubeVersion.Version)) -}}
{{- fail "admissionPolicy requires Kubernetes >= 1.30; set admissionPolicy.enabled=false" -}}
{{- end -}}
{{- $nlc := .Values.nodeLifecycleController -}}
{{- if and $nlc.enabled (not $nlc.leaderElection.enabled) (gt (int $nlc.replicaCount) 1) -}}
{{- fail "nodeLifecycleController.replicaCount > 1 needs nodeLifecycleController.leaderElection.enabled=true" -}}
{{- end -}}
{{- $ipam := .Values.nodeIpamController -}}
{{- if and $ipam.enabled (not (semverCompare ">=1.31.0-0" .Capabilities.KubeVersion.Version)) -}}
{{- fail "nodeIpamController requires Kubernetes >= 1.31: the ClusterCIDR CRD's validation rules use the CEL CIDR library, which older API servers refuse; set nodeIpamController.enabled=false" -}}
{{- end -}}
{{- if and $ipam.enabled (not $ipam.leaderElection.enabled) (gt (int $ipam.replicaCount) 1) -}}
{{- fail "nodeIpamController.replicaCount > 1 needs nodeIpamController.leaderElection.enabled=true" -}}
{{- end -}}
{{- if .Values.metrics.podMonitor.enabled -}}
{{- if not .Values.metrics.enabled -}}
{{- fail "metrics.podMonitor.enabled needs metrics.enabled=true: the agent's metrics listen on 127.0.0.1 only" -}}
{{- end -}}
{{- if and $nlc.enabled (not $nlc.metrics.enabled) -}}
{{- fail "metrics.podMonitor.enabled needs nodeLifecycleController.metrics.enabled=true: its metrics listen on 127.0.0.1 only" -}}
{{- end -}}
{{- if and $ipam.enabled (not $ipam.metrics.enabled) -}}
{{- fail "metrics.podMonitor.enabled needs nodeIpamController.metrics.enabled=true: its metrics listen on 127.0.0.1 only" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The static manifests name their namespace (`kubectl apply -f` has no --namespace);
     the chart leaves it to `helm --namespace` [compat since the original's v0.2.1]. */}}
{{- define "local-ccm.staticNamespace" -}}
{{- if .Values.staticManifests -}}
namespace: {{ .Release.Namespace }}
{{- end -}}
{{- end -}}
