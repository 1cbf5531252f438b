{{/* ------------------------------------------------------------ names */}}

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

{{/* "true" when the agent (DaemonSet, its RBAC and admission policy) is rendered. */}}
{{- define "local-ccm.agent.enabled" -}}
{{- if (.Values.agent | default dict).enabled | default false -}}
true
{{- end -}}
{{- end -}}

{{- define "local-ccm.agent.name" -}}
{{- include "local-ccm.fullname" . -}}
{{- end -}}

{{/* The static manifests (deploy/) keep the Go original's object names. */}}
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
{{- if .Values.controllerManager.enabled -}}
{{- include "local-ccm.nlc.serviceAccountName" . -}}
{{- else -}}
{{- .Values.nodeIpamController.serviceAccount.name | default (include "local-ccm.ipam.name" .) -}}
{{- end -}}
{{- end -}}

{{- /* The Lease of the Deployment in the lifecycle controller's place. */}}
{{- define "local-ccm.nlc.leaseName" -}}
{{- if .Values.controllerManager.enabled -}}
{{- .Values.controllerManager.leaderElection.resourceName -}}
{{- else -}}
{{- .Values.nodeLifecycleController.leaderElection.resourceName -}}
{{- end -}}
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

{{/* ------------------------------------------------------------ images */}}

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

{{/* apiServer.host: a direct API endpoint for bootstrap; declared env wins over the kubelet-injected variables.
     Called with (dict "root" $ "hostNetwork" bool). A node-local endpoint (localhost, 127.0.0.0/8,
     ::1: KubePrism or a node's own proxy) answers only in the node's network namespace, so a Pod
     with a network namespace of its own keeps the in-cluster `kubernetes` Service instead. */}}
{{- define "local-ccm.apiServerEnv" -}}
{{- $host := include "local-ccm.apiServer.host" .root -}}
{{- if and $host (or .hostNetwork (not (include "local-ccm.apiServer.nodeLocal" $host))) }}
- name: KUBERNETES_SERVICE_HOST
  value: {{ $host | quote }}
- name: KUBERNETES_SERVICE_PORT
  value: {{ .root.Values.apiServer.port | toString | quote }}
{{- end }}
{{- end -}}

{{/* apiServer.host as KUBERNETES_SERVICE_HOST takes it: an IPv6 address without the brackets
     a URL would put around it (`[fd00::1]` is `fd00::1`; the components add them, as for the
     kubelet's variable, which has none). */}}
{{- define "local-ccm.apiServer.host" -}}
{{- $host := .Values.apiServer.host | default "" | toString -}}
{{- if and (hasPrefix "[" $host) (hasSuffix "]" $host) -}}
{{- $host = $host | trimPrefix "[" | trimSuffix "]" -}}
{{- end -}}
{{- $host -}}
{{- end -}}

{{/* "true" when the host (a name or an address) is the node's own loopback. */}}
{{- define "local-ccm.apiServer.nodeLocal" -}}
{{- $h := . | lower | trimPrefix "[" | trimSuffix "]" -}}
{{- if or (eq $h "localhost") (hasSuffix ".localhost" $h) (regexMatch "^127\\.[0-9]+\\.[0-9]+\\.[0-9]+$" $h) (eq $h "::1") (eq $h "0:0:0:0:0:0:0:1") -}}
true
{{- end -}}
{{- end -}}

{{- define "local-ccm.fieldEnv" -}}
- name: {{ .name }}
  valueFrom:
    fieldRef:
      fieldPath: {{ .path }}
{{- end -}}

{{/* Health probes of a container; hostNetwork pods probe 127.0.0.1, where
     their health servers listen. */}}
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

{{/* ------------------------------------------------------------ pod security */}}

{{/* "true" when the NLC asks for raw ICMP sockets (icmpMode raw), hence uid 0 and NET_RAW.
     auto gets the unprivileged context: it uses raw sockets only where the user's own
     podSecurityContext/securityContext (values copied from the original) grant them, else
     datagram sockets. */}}
{{- define "local-ccm.nlc.rawICMP" -}}
{{- $c := .Values.nodeLifecycleController.controller -}}
{{- if and (include "local-ccm.nlc.icmp" .) (eq $c.icmpMode "raw") -}}
true
{{- end -}}
{{- end -}}

{{/* "true" when the NLC sends ICMP echoes at all (an icmp probe and pingCount > 0). */}}
{{- define "local-ccm.nlc.icmp" -}}
{{- $c := .Values.nodeLifecycleController.controller -}}
{{- if and (has "icmp" (splitList "," ($c.probe | nospace))) (gt (int $c.pingCount) 0) -}}
true
{{- end -}}
{{- end -}}

{{/* "true" when the lifecycle controller's Deployment runs on the host network: its own
     hostNetwork, or node IPAM's when the controller manager hosts it. Pod CIDRs must exist
     before a CNI that reads spec.podCIDRs starts, so the manager assigning them cannot wait
     for a pod network (it would never start on a new cluster). */}}
{{- define "local-ccm.nlc.hostNetwork" -}}
{{- $ipam := and .Values.controllerManager.enabled .Values.nodeIpamController.enabled -}}
{{- if or .Values.nodeLifecycleController.hostNetwork (and $ipam .Values.nodeIpamController.hostNetwork) -}}
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
{{- /* Not with hostNetwork: the API server refuses net.* sysctls there; the host's applies. */}}
{{- if and (include "local-ccm.nlc.icmp" .) (not (include "local-ccm.nlc.hostNetwork" .)) }}
# Datagram ICMP sockets for every group, in the Pod's own network namespace (a safe sysctl).
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

{{/* Problems of one image value (dict "key" "image" "image" $image "ipam" bool): an image of
     the Go original (cozystack/local-ccm, releases v0.1.0-v0.3.0) or of upstream
     kubernetes-sigs/node-ipam-controller has none of the flags this chart renders, so its pods
     would crash-loop. This project's releases start at v0.4.0, so an older tag is always one of
     the Go original's. */}}
{{- define "local-ccm.foreignImage" -}}
{{- $repo := .image.repository | default "" -}}
{{- $tag := .image.tag | default "" | toString -}}
{{- if contains "cozystack/local-ccm" $repo }}
- {{ .key }}.repository={{ $repo }} is the Go original's image (cozystack/local-ccm): remove {{ .key }}.repository and {{ .key }}.tag, the chart then runs its own image
{{- else if and .ipam (regexMatch "(^|/)node-ipam-controller$" $repo) }}
- {{ .key }}.repository={{ $repo }} is upstream kubernetes-sigs/node-ipam-controller's image: remove {{ .key }}.repository and {{ .key }}.tag, the chart then runs its own image
{{- end }}
{{- if and .ipam (regexMatch "^v?0\\.0\\.[0-9]+$" $tag) }}
- {{ .key }}.tag={{ $tag }} is an upstream node-ipam-controller release: remove {{ .key }}.tag, the chart then uses its appVersion
{{- else if regexMatch "^v?0\\.[0-3]\\.[0-9]+$" $tag }}
- {{ .key }}.tag={{ $tag }} is a release of the Go original (this chart's images start at v0.4.0): remove {{ .key }}.tag, the chart then uses its appVersion
{{- end }}
{{- end -}}

{{/* Values copied from the Go original's chart or from upstream node-ipam-controller's chart
     that this chart cannot honour: listed all at once, and the render fails before Helm
     changes anything, so the running release stays as it is. */}}
{{- define "local-ccm.foreignValues" -}}
{{- $ipam := .Values.nodeIpamController -}}
{{- /* Checked even without the agent: the controllers fall back to it. */}}
{{- include "local-ccm.foreignImage" (dict "key" "image" "image" .Values.image "ipam" true) }}
{{- if .Values.nodeLifecycleController.enabled }}
{{- include "local-ccm.foreignImage" (dict "key" "nodeLifecycleController.image" "image" .Values.nodeLifecycleController.image "ipam" false) }}
{{- end }}
{{- if $ipam.enabled }}
{{- include "local-ccm.foreignImage" (dict "key" "nodeIpamController.image" "image" $ipam.image "ipam" true) }}
{{- range $key := list "nameOverride" "fullnameOverride" }}
{{- if get $ipam $key }}
- nodeIpamController.{{ $key }} (upstream node-ipam-controller's chart) is not supported: remove it; the top-level {{ $key }} names every object of this chart
{{- end }}
{{- end }}
{{- with $ipam.service }}
{{- if and (hasKey . "port") (ne (int .port) 8081) }}
- nodeIpamController.service.port={{ .port }} is not supported: the controller serves /healthz and /readyz on 8081 (and /metrics with metrics.secure=false); remove nodeIpamController.service
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* ------------------------------------------------------------ CIDRs
     The binaries refuse a CIDR with host bits set (10.0.0.1/8); so does the render, with the
     value's key. values.schema.json has checked the form already. */}}

{{/* 2^.n as an integer. */}}
{{- define "local-ccm.pow2" -}}
{{- $v := 1 -}}
{{- range until (int .) -}}{{- $v = mul $v 2 -}}{{- end -}}
{{- $v -}}
{{- end -}}

{{/* An address as fixed-width hex (8 digits for IPv4, 32 for IPv6): two of one family
     compare as their addresses do. */}}
{{- define "local-ccm.ip.hex" -}}
{{- $addr := trim . | lower -}}
{{- if contains ":" $addr -}}
{{- $halves := splitList "::" $addr -}}
{{- $groups := splitList ":" $addr -}}
{{- if eq (len $halves) 2 -}}
{{- $left := ternary list (splitList ":" (index $halves 0)) (eq (index $halves 0) "") -}}
{{- $right := ternary list (splitList ":" (index $halves 1)) (eq (index $halves 1) "") -}}
{{- $groups = $left -}}
{{- range until (int (sub 8 (add (len $left) (len $right)))) -}}{{- $groups = append $groups "0" -}}{{- end -}}
{{- $groups = concat $groups $right -}}
{{- end -}}
{{- range $groups -}}{{- printf "%s%s" (repeat (int (sub 4 (len .))) "0") . -}}{{- end -}}
{{- else -}}
{{- range splitList "." $addr -}}{{- printf "%02x" (int .) -}}{{- end -}}
{{- end -}}
{{- end -}}

{{/* "true" when the CIDR has host bits set (v4 or v6, written any way the pattern allows). */}}
{{- define "local-ccm.cidr.hostBits" -}}
{{- $parts := splitList "/" (trim .) -}}
{{- $addr := first $parts | lower -}}
{{- $prefix := int (last $parts) -}}
{{- if contains ":" $addr -}}
{{- $hex := include "local-ccm.ip.hex" $addr -}}
{{- $nibble := dict "0" 0 "1" 1 "2" 2 "3" 3 "4" 4 "5" 5 "6" 6 "7" 7 "8" 8 "9" 9 "a" 10 "b" 11 "c" 12 "d" 13 "e" 14 "f" 15 -}}
{{- $bad := false -}}
{{- range $i, $c := splitList "" $hex -}}
{{- $end := mul (add $i 1) 4 -}}
{{- if gt $end $prefix -}}
{{- $free := ternary 4 (sub $end $prefix) (le (mul $i 4) $prefix | not) -}}
{{- if ne (mod (get $nibble $c) (int (include "local-ccm.pow2" (min 4 $free)))) 0 -}}{{- $bad = true -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- if $bad -}}true{{- end -}}
{{- else -}}
{{- $value := 0 -}}
{{- range splitList "." $addr -}}{{- $value = add (mul $value 256) (int .) -}}{{- end -}}
{{- if ne (mod $value (int (include "local-ccm.pow2" (sub 32 $prefix)))) 0 -}}true{{- end -}}
{{- end -}}
{{- end -}}

{{/* Problems of a list of CIDRs (dict "key" key "cidrs" list); "!" (an exclusion) is allowed. */}}
{{- define "local-ccm.cidr.problems" -}}
{{- range .cidrs -}}
{{- $cidr := trimPrefix "!" (trim .) | trim -}}
{{- $longest := ternary 128 32 (contains ":" $cidr) -}}
{{- if and $cidr (gt (int (last (splitList "/" $cidr))) $longest) }}
- {{ $.key }}: {{ $cidr }} has a prefix longer than {{ $longest }} bits (the binary refuses it)
{{- else if and $cidr (include "local-ccm.cidr.hostBits" $cidr) }}
- {{ $.key }}: {{ $cidr }} has host bits set (the binary refuses it); use its network address
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Problems of a pool's addresses the CRD's admission cannot see (docs/loadbalancer.md):
     a CIDR's prefix and host bits, a range that mixes families or starts after it ends (a
     failed post-install hook would leave a failed release with its workloads created). */}}
{{- define "local-ccm.lb.addressProblems" -}}
{{- range .addresses -}}
{{- $entry := trim . -}}
{{- if contains "-" $entry -}}
{{- $ends := splitList "-" $entry -}}
{{- $first := trim (first $ends) -}}
{{- $last := trim (last $ends) -}}
{{- if ne (contains ":" $first) (contains ":" $last) }}
- {{ $.key }}: {{ $entry }} mixes IPv4 and IPv6
{{- else if gt (include "local-ccm.ip.hex" $first) (include "local-ccm.ip.hex" $last) }}
- {{ $.key }}: {{ $entry }} starts after it ends
{{- end -}}
{{- else if contains "/" $entry -}}
{{- include "local-ccm.cidr.problems" (dict "key" $.key "cidrs" (list $entry)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Problems of the IPAM default pool: host bits, one CIDR per family, mask sizes. */}}
{{- define "local-ccm.ipam.poolProblems" -}}
{{- $c := .Values.nodeIpamController.controller -}}
{{- include "local-ccm.cidr.problems" (dict "key" "nodeIpamController.controller.clusterCIDRs" "cidrs" ($c.clusterCIDRs | default list)) -}}
{{- include "local-ccm.cidr.problems" (dict "key" "nodeIpamController.controller.serviceClusterIPRanges" "cidrs" ($c.serviceClusterIPRanges | default list)) -}}
{{- range $key := list "clusterCIDRs" "serviceClusterIPRanges" -}}
{{- $families := list -}}
{{- range (get $c $key | default list) -}}{{- $families = append $families (ternary "6" "4" (contains ":" .)) -}}{{- end -}}
{{- if ne (len $families) (len (uniq $families)) }}
- nodeIpamController.controller.{{ $key }}: at most one IPv4 and one IPv6 CIDR
{{- end -}}
{{- end -}}
{{- range ($c.clusterCIDRs | default list) -}}
{{- $prefix := int (last (splitList "/" .)) -}}
{{- if contains ":" . -}}
{{- $mask := int $c.nodeCIDRMaskSizeIPv6 -}}
{{- if lt $mask $prefix }}
- nodeIpamController.controller.nodeCIDRMaskSizeIPv6={{ $mask }} is shorter than the prefix of {{ . }}
{{- else if gt (sub $mask $prefix) 16 }}
- nodeIpamController.controller.nodeCIDRMaskSizeIPv6={{ $mask }}: {{ . }} would have more than 65536 blocks (the mask may be at most 16 bits longer than the prefix)
{{- end -}}
{{- else -}}
{{- $mask := int $c.nodeCIDRMaskSizeIPv4 -}}
{{- if lt $mask $prefix }}
- nodeIpamController.controller.nodeCIDRMaskSizeIPv4={{ $mask }} is shorter than the prefix of {{ . }}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Values the binaries would refuse at start-up, found at render time. */}}
{{- define "local-ccm.refusedValues" -}}
{{- if include "local-ccm.agent.enabled" . -}}
{{- $ip := .Values.ipDetection -}}
{{- range $key := list "internalIPCIDRs" "externalIPCIDRs" "externalIPSubnet" -}}
{{- include "local-ccm.cidr.problems" (dict "key" (printf "ipDetection.%s" $key) "cidrs" (splitList "," (get $ip $key | default ""))) -}}
{{- end -}}
{{- end -}}
{{- if .Values.nodeIpamController.enabled -}}
{{- include "local-ccm.ipam.poolProblems" . -}}
{{- end -}}
{{- $csr := .Values.controllerManager.kubeletServingApprover -}}
{{- if and .Values.controllerManager.enabled $csr.enabled -}}
{{- include "local-ccm.cidr.problems" (dict "key" "controllerManager.kubeletServingApprover.ipPrefixes" "cidrs" ($csr.ipPrefixes | default list)) -}}
{{- end -}}
{{- $bmc := .Values.controllerManager.bmc -}}
{{- if and .Values.controllerManager.enabled $bmc.enabled (lt (include "local-ccm.seconds" $bmc.pollInterval | float64) 1.0) }}
- controllerManager.bmc.pollInterval: {{ $bmc.pollInterval }} is under 1s (--bmc-poll-interval must be at least 1s)
{{- end -}}
{{- if and .Values.controllerManager.enabled $bmc.enabled (lt (include "local-ccm.seconds" $bmc.powerOffTimeout | float64) 1.0) }}
- controllerManager.bmc.powerOffTimeout: {{ $bmc.powerOffTimeout }} is under 1s (--bmc-power-off-timeout must be at least 1s)
{{- end -}}
{{- if and .Values.controllerManager.enabled $bmc.enabled (gt (addf 30.0 (mulf 1.1 (include "local-ccm.seconds" $bmc.pollInterval | float64))) 120.0) }}
- controllerManager.bmc.pollInterval: {{ $bmc.pollInterval }} is too long for the lifecycle controller's --bmc-max-age (2m): a NodeBMC may be 30s + the interval + 10 % old
{{- end -}}
{{- if not .Values.image.repository }}
- image.repository is empty: the pods would name no image
{{- end -}}
{{- if include "local-ccm.agent.enabled" . -}}
{{- include "local-ccm.agent.timingProblems" . -}}
{{- $l2 := .Values.l2Announcement -}}
{{- if $l2.enabled -}}
{{- include "local-ccm.lease.problems" (dict "key" "l2Announcement" "lease" $l2.leaseDuration "deadline" $l2.renewDeadline "period" $l2.renewPeriod "names" (list "leaseDuration" "renewDeadline" "renewPeriod")) -}}
{{- end -}}
{{- end -}}
{{- $nlc := .Values.nodeLifecycleController -}}
{{- if $nlc.enabled -}}
{{- include "local-ccm.nlc.problems" $nlc -}}
{{- end -}}
{{- range $key, $part := dict "nodeLifecycleController" $nlc "nodeIpamController" .Values.nodeIpamController -}}
{{- $le := $part.leaderElection -}}
{{- if and $part.enabled $le.enabled -}}
{{- include "local-ccm.lease.problems" (dict "key" (printf "%s.leaderElection" $key) "lease" $le.leaseDuration "deadline" $le.renewDeadline "period" $le.retryPeriod "names" (list "leaseDuration" "renewDeadline" "retryPeriod")) -}}
{{- end -}}
{{- end -}}
{{- $lb := .Values.controllerManager.loadBalancer -}}
{{- if and .Values.controllerManager.enabled $lb.enabled -}}
{{- include "local-ccm.cidr.problems" (dict "key" "controllerManager.loadBalancer.serviceCIDRs" "cidrs" ($lb.serviceCIDRs | default list)) -}}
{{- range $i, $pool := $lb.pools | default list -}}
{{- include "local-ccm.lb.addressProblems" (dict "key" (printf "controllerManager.loadBalancer.pools[%d].addresses" $i) "addresses" ($pool.addresses | default list)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The agent's intervals as its flags check them (agent/options.py). */}}
{{- define "local-ccm.agent.timingProblems" -}}
{{- $c := .Values.controller -}}
{{- $reconcile := include "local-ccm.seconds" $c.reconcileInterval | float64 -}}
{{- $resync := include "local-ccm.seconds" $c.resyncInterval | float64 -}}
{{- if lt $reconcile 1.0 }}
- controller.reconcileInterval: {{ $c.reconcileInterval }} is under 1s (--reconcile-interval must be at least 1s)
{{- end -}}
{{- if lt $resync 60.0 }}
- controller.resyncInterval: {{ $c.resyncInterval }} is under 1m (--resync-interval must be at least 1m)
{{- else if lt $resync $reconcile }}
- controller.resyncInterval: {{ $c.resyncInterval }} is shorter than controller.reconcileInterval {{ $c.reconcileInterval }}
{{- end -}}
{{- if gt (include "local-ccm.seconds" $c.settleTime | float64) 300.0 }}
- controller.settleTime: {{ $c.settleTime }} is over 5m (--settle-time must be between 0s and 5m0s)
{{- end -}}
{{- with $c.providerID -}}
{{- if not (contains "://" .) }}
- controller.providerID: {{ . | quote }} must contain :// (e.g. "local://{system_uuid}")
{{- end -}}
{{- range regexFindAll "\\{[^{}]*\\}" . -1 -}}
{{- if not (has . (list "{node_name}" "{system_uuid}" "{machine_id}")) }}
- controller.providerID: unknown placeholder {{ . }}; use {node_name}, {system_uuid}, {machine_id}
{{- end -}}
{{- end -}}
{{- if regexMatch "[{}]" (regexReplaceAll "\\{[^{}]*\\}" . "") }}
- controller.providerID: {{ . | quote }} has an unbalanced brace
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A Lease's timing as every binary checks it: duration > deadline > 1.2 x period.
     Arguments: key (the values' path), lease, deadline, period, names (their three keys). */}}
{{- define "local-ccm.lease.problems" -}}
{{- $lease := include "local-ccm.seconds" .lease | float64 -}}
{{- $deadline := include "local-ccm.seconds" .deadline | float64 -}}
{{- $period := include "local-ccm.seconds" .period | float64 -}}
{{- $n := .names -}}
{{- if not (gt $lease $deadline) }}
- {{ .key }}: {{ index $n 0 }} {{ .lease }} must be greater than {{ index $n 1 }} {{ .deadline }}
{{- end -}}
{{- if not (gt $deadline (mulf 1.2 $period)) }}
- {{ .key }}: {{ index $n 1 }} {{ .deadline }} must be greater than 1.2 x {{ index $n 2 }} {{ .period }}
{{- end -}}
{{- end -}}

{{/* The lifecycle controller's values its flags refuse (lifecycle/options.py). */}}
{{- define "local-ccm.nlc.problems" -}}
{{- $c := .controller -}}
{{- $max := toString $c.maxUnhealthy -}}
{{- if and (hasSuffix "%" $max) (gt (trimSuffix "%" $max | float64) 100.0) }}
- nodeLifecycleController.controller.maxUnhealthy: {{ $max }} is over 100%
{{- end -}}
{{- if not (gt (include "local-ccm.seconds" $c.notReadyTimeout | float64) 0.0) }}
- nodeLifecycleController.controller.notReadyTimeout: {{ $c.notReadyTimeout }} must be more than 0
{{- end -}}
{{- range splitList "," ($c.probe | toString | nospace) -}}
{{- if hasPrefix "tcp:" . -}}
{{- $port := trimPrefix "tcp:" . | int -}}
{{- if or (lt $port 1) (gt $port 65535) }}
- nodeLifecycleController.controller.probe: {{ . }} needs a port 1-65535
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The seconds of a Go duration the schema accepted ("1m30s", "500ms"). */}}
{{- define "local-ccm.seconds" -}}
{{- $units := dict "ns" 0.000000001 "us" 0.000001 "µs" 0.000001 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 -}}
{{- $seconds := 0.0 -}}
{{- range regexFindAll "[0-9.]+(ns|us|µs|ms|s|m|h)" (toString .) -1 -}}
{{- $unit := regexFind "(ns|us|µs|ms|s|m|h)$" . -}}
{{- $seconds = addf $seconds (mulf (trimSuffix $unit . | float64) (get $units $unit)) -}}
{{- end -}}
{{- $seconds -}}
{{- end -}}

{{/* Values that contradict each other, each a "\n- " line (empty: none). */}}
{{- define "local-ccm.relationProblems" -}}
{{- $agent := include "local-ccm.agent.enabled" . -}}
{{- if not (or $agent .Values.nodeLifecycleController.enabled .Values.nodeIpamController.enabled) }}
- agent, nodeLifecycleController and nodeIpamController are all off: the release would install nothing
{{- end -}}
{{- $given := .Values.apiServer.host | default "" | toString -}}
{{- $host := include "local-ccm.apiServer.host" . -}}
{{- if or (contains "/" $host) (contains " " $host) (eq (len (splitList ":" $host)) 2) (contains "[" $host) (contains "]" $host) }}
- {{ printf "apiServer.host: %q must be a host name or address alone (no scheme, path or :port; the port is apiServer.port)" $given }}
{{- end -}}
{{- $actions := .Values.admissionPolicy.validationActions | default list -}}
{{- if and (has "Deny" $actions) (has "Warn" $actions) }}
- admissionPolicy.validationActions: Deny and Warn together are refused by the API server (use [Deny] or [Warn, Audit])
{{- end -}}
{{- if and $agent .Values.admissionPolicy.enabled (not (semverCompare ">=1.30.0-0" .Capabilities.KubeVersion.Version)) }}
- admissionPolicy requires Kubernetes >= 1.30; set admissionPolicy.enabled=false
{{- end -}}
{{- $nlc := .Values.nodeLifecycleController -}}
{{- if and $nlc.enabled (not $nlc.leaderElection.enabled) (gt (int $nlc.replicaCount) 1) }}
- nodeLifecycleController.replicaCount > 1 needs nodeLifecycleController.leaderElection.enabled=true
{{- end -}}
{{- if and .Values.controllerManager.enabled (not $nlc.enabled) }}
- controllerManager.enabled runs in nodeLifecycleController's place: it needs nodeLifecycleController.enabled=true
{{- end -}}
{{- if and .Values.controllerManager.kubeletServingApprover.enabled (not .Values.controllerManager.enabled) }}
- controllerManager.kubeletServingApprover.enabled runs in local-ccm-controller-manager: it needs controllerManager.enabled=true
{{- end -}}
{{- $lb := .Values.controllerManager.loadBalancer -}}
{{- if and $lb.enabled (not .Values.controllerManager.enabled) }}
- controllerManager.loadBalancer.enabled runs in local-ccm-controller-manager: it needs controllerManager.enabled=true
{{- end -}}
{{- if and .Values.controllerManager.bmc.enabled (not .Values.controllerManager.enabled) }}
- controllerManager.bmc.enabled runs in local-ccm-controller-manager: it needs controllerManager.enabled=true
{{- end -}}
{{- if and .Values.controllerManager.bmc.fencing (not .Values.controllerManager.bmc.enabled) }}
- controllerManager.bmc.fencing asks node-bmc to power Nodes off: it needs controllerManager.bmc.enabled=true
{{- end -}}
{{- if and .Values.controllerManager.bmc.fencing (not $nlc.controller.outOfServiceTaint) }}
- controllerManager.bmc.fencing powers a Node off to taint it out-of-service: it needs nodeLifecycleController.controller.outOfServiceTaint=true
{{- end -}}
{{- if and $lb.kubeVipConfigMap (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-.a-z0-9]*[a-z0-9])?$" $lb.kubeVipConfigMap)) }}
- {{ printf "controllerManager.loadBalancer.kubeVipConfigMap: %q is not namespace/name (empty turns it off)" $lb.kubeVipConfigMap }}
{{- end -}}
{{- $poolNames := list -}}
{{- range $i, $p := $lb.pools -}}
{{- if has $p.name $poolNames }}
- {{ printf "controllerManager.loadBalancer.pools[%d]: the name %q is used twice" $i $p.name }}
{{- end -}}
{{- $poolNames = append $poolNames $p.name -}}
{{- end -}}
{{- $ipam := .Values.nodeIpamController -}}
{{- if and $ipam.enabled (not (semverCompare ">=1.31.0-0" .Capabilities.KubeVersion.Version)) }}
- nodeIpamController requires Kubernetes >= 1.31: the ClusterCIDR CRD's validation rules use the CEL CIDR library, which older API servers refuse; set nodeIpamController.enabled=false
{{- end -}}
{{- if and $ipam.enabled (not $ipam.leaderElection.enabled) (gt (int $ipam.replicaCount) 1) }}
- nodeIpamController.replicaCount > 1 needs nodeIpamController.leaderElection.enabled=true
{{- end -}}
{{- $pm := .Values.metrics.podMonitor -}}
{{- if $pm.enabled -}}
{{- if and $agent (eq (toString $pm.agent) "true") (not .Values.metrics.enabled) }}
- metrics.podMonitor.agent=true needs metrics.enabled=true: the agent's metrics listen on 127.0.0.1 only (null: a PodMonitor only while they are open)
{{- end -}}
{{- if and $nlc.enabled (eq (toString $pm.nodeLifecycleController) "true") (not $nlc.metrics.enabled) }}
- metrics.podMonitor.nodeLifecycleController=true needs nodeLifecycleController.metrics.enabled=true: its metrics listen on 127.0.0.1 only
{{- end -}}
{{- if and $ipam.enabled (eq (toString $pm.nodeIpamController) "true") (not $ipam.metrics.enabled) }}
- metrics.podMonitor.nodeIpamController=true needs nodeIpamController.metrics.enabled=true: its metrics listen on 127.0.0.1 only
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Every section of values.yaml the templates read keys of (a map with defaults; not the
     Kubernetes objects passed through whole, such as resources or securityContext, which a
     user may set to null), one dotted path a line. A test compares it with values.yaml. */}}
{{- define "local-ccm.valueSections" -}}
image
apiServer
rbac
rbac.clusterRoleNames
events
admissionPolicy
metrics
metrics.podMonitor
metrics.podMonitor.bearerTokenSecret
metrics.reader
metrics.reader.serviceAccount
monitoring
monitoring.prometheusRule
monitoring.prometheusRule.alerts
monitoring.prometheusRule.alerts.nodeUninitialized
monitoring.prometheusRule.alerts.addressDetectionFailing
monitoring.prometheusRule.alerts.lbPoolNearlyExhausted
monitoring.prometheusRule.alerts.lbPoolExhausted
monitoring.prometheusRule.alerts.ipamNodesWaiting
monitoring.prometheusRule.alerts.lifecycleBreakerOpen
monitoring.prometheusRule.alerts.csrDenied
monitoring.prometheusRule.alerts.bmcUnreachable
monitoring.prometheusRule.alerts.bmcCredentialsRefused
monitoring.prometheusRule.alerts.bmcPowerStateUnknown
monitoring.prometheusRule.alerts.noLeader
monitoring.prometheusRule.alerts.waitingForLease
monitoring.prometheusRule.alerts.apiServerUnreachable
monitoring.dashboard
agent
serviceAccount
ipDetection
controller
azure
nodeMetadata
l2Announcement
nodeLifecycleController
nodeLifecycleController.image
nodeLifecycleController.controller
nodeLifecycleController.leaderElection
nodeLifecycleController.serviceAccount
nodeLifecycleController.pdb
nodeLifecycleController.metrics
controllerManager
controllerManager.leaderElection
controllerManager.kubeletServingApprover
controllerManager.loadBalancer
controllerManager.bmc
nodeIpamController
nodeIpamController.image
nodeIpamController.leaderElection
nodeIpamController.controller
nodeIpamController.serviceAccount
nodeIpamController.pdb
nodeIpamController.metrics
{{- end -}}

{{/* The sections of local-ccm.valueSections that .Values lacks, comma-separated. */}}
{{- define "local-ccm.missingSections" -}}
{{- $missing := list -}}
{{- range $path := splitList "\n" (include "local-ccm.valueSections" .) -}}
{{- $node := $.Values -}}
{{- $found := true -}}
{{- range $key := splitList "." $path -}}
{{- if and $found (kindIs "map" $node) (hasKey $node $key) -}}
{{- $node = index $node $key -}}
{{- else -}}
{{- $found = false -}}
{{- end -}}
{{- end -}}
{{- if not $found }}{{ $missing = append $missing $path }}{{ end -}}
{{- end -}}
{{- join ", " $missing -}}
{{- end -}}

{{- define "local-ccm.validate" -}}
{{- /* `helm upgrade --reuse-values` renders with the defaults of the chart the release was
     installed from instead of these (a known Helm behaviour): from the Go original's chart, or
     from an earlier release of this one, whole sections are missing, and the templates would
     stop on the first of them with a nil pointer. */}}
{{- with include "local-ccm.missingSections" . }}
{{- fail (printf "the values lack sections this chart's defaults have (%s): `helm upgrade --reuse-values` reuses the defaults of the chart the release was installed from; nothing was changed. Use --reset-then-reuse-values (Helm >= 3.14) or pass your values file with -f" .) }}
{{- end }}
{{- with include "local-ccm.foreignValues" . }}
{{- fail (printf "these values, copied from the Go original's chart or upstream node-ipam-controller's chart, would run pods that cannot start; nothing was changed. Change them and run the command again (the chart README, Migration):%s" .) }}
{{- end }}
{{- $problems := printf "%s%s" (include "local-ccm.refusedValues" .) (include "local-ccm.relationProblems" .) -}}
{{- with $problems }}
{{- fail (printf "values the chart or the binaries would refuse (every one listed):%s" .) }}
{{- end }}
{{- end -}}

{{/* Every namespaced object names its namespace: `kubectl apply -f` of a render and Talos'
     inlineManifests have no namespace default, and an object without one would land in the
     applier's namespace (usually `default`) instead of the one given to `helm template -n`. */}}
{{- define "local-ccm.namespace" -}}
namespace: {{ .Release.Namespace }}
{{- end -}}

{{/* ------------------------------------------------------------ secure metrics */}}

{{- define "local-ccm.metricsCertDir" -}}
/etc/local-ccm/metrics-certs
{{- end -}}

{{/* The volumeMounts of a controller's metrics.certSecret (nothing without one). */}}
{{- define "local-ccm.metricsCertMount" -}}
{{- if and .secure .certSecret }}
volumeMounts:
  - name: metrics-certs
    mountPath: {{ include "local-ccm.metricsCertDir" . }}
    readOnly: true
{{- end }}
{{- end -}}

{{- define "local-ccm.metricsCertVolume" -}}
{{- if and .secure .certSecret }}
volumes:
  - name: metrics-certs
    secret:
      secretName: {{ .certSecret }}
{{- end }}
{{- end -}}

{{/* "true" when a component gets a PodMonitor: metrics.podMonitor.enabled and the component's
     key under it (agent, nodeLifecycleController, nodeIpamController) true, or null while the
     component serves its metrics beyond loopback. Per component, so the controllers can be
     scraped while every node's plain agent /metrics stays on 127.0.0.1.
     Arguments: root (the chart), key, served (the component's metrics.enabled). */}}
{{- define "local-ccm.podMonitor.on" -}}
{{- $pm := .root.Values.metrics.podMonitor -}}
{{- $choice := index $pm .key -}}
{{- if and $pm.enabled (ternary $choice .served (kindIs "bool" $choice)) -}}
true
{{- end -}}
{{- end -}}

{{/* One podMetricsEndpoint: plain, or HTTPS with the operator's bearer token Secret.
     Arguments: root (the chart), metrics (the component's metrics values), port. */}}
{{- define "local-ccm.podMetricsEndpoint" -}}
{{- $pm := .root.Values.metrics.podMonitor -}}
- port: {{ .port }}
  path: /metrics
  {{- if .metrics.secure }}
  scheme: https
  tlsConfig:
    {{- if .metrics.certSecret }}
    ca:
      secret:
        name: {{ .metrics.certSecret }}
        key: ca.crt
    {{- with $pm.tlsServerName }}
    serverName: {{ . }}
    {{- end }}
    {{- else }}
    # The controller's certificate is self-signed, made on the first scrape.
    insecureSkipVerify: true
    {{- end }}
  {{- with $pm.bearerTokenSecret.name }}
  authorization:
    type: Bearer
    credentials:
      name: {{ . }}
      key: {{ $pm.bearerTokenSecret.key }}
  {{- end }}
  {{- end }}
{{- end -}}

{{- /* node-ipam-controller's pool flags (its Deployment and the controller manager's). */}}
{{- define "local-ccm.ipam.poolArgs" -}}
{{- with .clusterCIDRs }}
- {{ printf "--cluster-cidr=%s" (join "," .) | quote }}
{{- end }}
- --node-cidr-mask-size-ipv4={{ .nodeCIDRMaskSizeIPv4 }}
- --node-cidr-mask-size-ipv6={{ .nodeCIDRMaskSizeIPv6 }}
{{- with .serviceClusterIPRanges }}
- {{ printf "--service-cluster-ip-range=%s" (join "," .) | quote }}
{{- end }}
{{- end -}}

{{/* node-bmc's credentials namespace: its value, else the release namespace. */}}
{{- define "local-ccm.bmc.credentialsNamespace" -}}
{{- .Values.controllerManager.bmc.credentialsNamespace | default .Release.Namespace -}}
{{- end -}}
