{{/*
The descheduler's pod spec, shared by the CronJob (manifests/descheduler) and
the Deployment (manifests/descheduler-deployment).
Argument: dict "root" $ "deployment" bool.
*/}}
{{- define "headroom.descheduler.podSpec" -}}
{{- $v := .root.Values.descheduler -}}
serviceAccountName: {{ include "headroom.serviceAccountName" (dict "root" .root "component" "descheduler") }}
{{- include "headroom.imagePullSecrets" .root | nindent 0 }}
{{- with $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- if not .deployment }}
restartPolicy: Never
{{- end }}
securityContext:
  {{- include "headroom.securityContext" (dict "defaults" "seccompProfile: {type: RuntimeDefault}" "override" $v.podSecurityContext "value" "descheduler.podSecurityContext" "allowWeaker" $v.allowWeakerSecurityContext) | nindent 2 }}
{{- include "headroom.placement" $v }}
{{- if .deployment }}
{{- with $v.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
containers:
- name: descheduler
  {{- include "headroom.containerImage" (dict "image" $v.image "root" .root) | nindent 2 }}
  args:
  - --policy-config-file=/policy-dir/policy.yaml
  {{- if .deployment }}
  - --descheduling-interval={{ $v.interval }}
  {{- $le := $v.leaderElection }}
  {{- if $le.enabled }}
  # Its own Lease, apart from the upstream descheduler's default
  # ("descheduler" in kube-system), so both may run in one cluster.
  - --leader-elect=true
  - --leader-elect-resource-lock=leases
  - --leader-elect-resource-name={{ $le.leaseName }}
  - --leader-elect-resource-namespace={{ include "headroom.descheduler.leaseNamespace" .root }}
  {{- with $le.leaseDuration }}
  - --leader-elect-lease-duration={{ . }}
  {{- end }}
  {{- with $le.renewDeadline }}
  - --leader-elect-renew-deadline={{ . }}
  {{- end }}
  {{- with $le.retryPeriod }}
  - --leader-elect-retry-period={{ . }}
  {{- end }}
  {{- else }}
  {{- if gt (int $v.replicas) 1 }}
  {{- fail (printf "descheduler.leaderElection.enabled is false with descheduler.replicas=%v: every replica would evict on its own; set descheduler.replicas=1 or keep leader election" $v.replicas) }}
  {{- end }}
  - --leader-elect=false
  {{- end }}
  # /metrics and /healthz over HTTPS (self-signed) on this port.
  - --bind-address=0.0.0.0
  - --secure-port={{ $v.metricsPort }}
  {{- with include "headroom.metricsTLS.args" (dict "root" .root "name" "headroom-descheduler") | trim }}
  {{- . | nindent 2 }}
  {{- end }}
  {{- else }}
  # One descheduling run, then exit.
  - --descheduling-interval=0
  # A run of seconds needs no health or metrics endpoint.
  - --secure-port=0
  {{- end }}
  - --v={{ $v.logLevel }}
  - --logging-format={{ $v.logFormat }}
  {{- range $v.extraArgs }}
  - {{ . | quote }}
  {{- end }}
  {{- if .deployment }}
  ports:
  - name: metrics
    containerPort: {{ $v.metricsPort }}
    protocol: TCP
  livenessProbe:
    httpGet: {path: /healthz, port: metrics, scheme: HTTPS}
    initialDelaySeconds: 10
    periodSeconds: 20
  {{- end }}
  {{- with $v.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.extraEnv }}
  env:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- include "headroom.securityContext" (dict "defaults" (include "headroom.containerSecurityContext" .root) "override" $v.securityContext "value" "descheduler.securityContext" "allowWeaker" $v.allowWeakerSecurityContext) | nindent 4 }}
  volumeMounts:
  - name: policy
    mountPath: /policy-dir
    readOnly: true
  # The headroom-scheduler's configuration: RelieveNodePressure checks at
  # start that its room check's floor is NodePIDs' (schedulerConfigFile).
  # Optional: without the scheduler the check is skipped, logged.
  - name: scheduler-config
    mountPath: /etc/headroom/scheduler
    readOnly: true
  {{- if .deployment }}
  {{- with include "headroom.metricsTLS.volumeMount" (dict "root" .root "name" "headroom-descheduler") | trim }}
  {{- . | nindent 2 }}
  {{- end }}
  {{- end }}
  {{- with $v.extraVolumeMounts }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
volumes:
- name: policy
  configMap:
    name: {{ include "headroom.descheduler.policyConfigMapName" .root }}
- name: scheduler-config
  configMap:
    {{- if .root.Values.scheduler.enabled }}
    name: {{ include "headroom.scheduler.configMapName" .root }}
    {{- else }}
    name: headroom-scheduler-config
    {{- end }}
    optional: true
{{- if .deployment }}
{{- with include "headroom.metricsTLS.volume" (dict "root" .root "name" "headroom-descheduler") | trim }}
{{ . }}
{{- end }}
{{- end }}
{{- with $v.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}
