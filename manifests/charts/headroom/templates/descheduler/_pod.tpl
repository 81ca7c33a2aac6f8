{{/*
The descheduler's pod spec, shared by the CronJob and the Deployment.
Argument: dict "root" $ "args" (list of mode-specific arguments) "deployment" bool.
*/}}
{{- define "headroom.descheduler.podSpec" -}}
{{- $v := .root.Values.descheduler -}}
serviceAccountName: headroom-descheduler
{{- with $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- if not .deployment }}
restartPolicy: Never
{{- end }}
securityContext:
  seccompProfile: {type: RuntimeDefault}
{{- include "headroom.placement" $v }}
containers:
- name: descheduler
  {{- include "headroom.containerImage" (dict "image" $v.image "root" .root) | nindent 2 }}
  args:
  - --policy-config-file=/policy-dir/policy.yaml
  {{- range .args }}
  - {{ . }}
  {{- end }}
  - --v={{ $v.logLevel }}
  {{- range $v.extraArgs }}
  - {{ . | quote }}
  {{- end }}
  {{- if .deployment }}
  ports:
  - name: metrics
    containerPort: {{ $v.metricsPort }}
  livenessProbe:
    httpGet: {path: /healthz, port: metrics, scheme: HTTPS}
    initialDelaySeconds: 5
    periodSeconds: 20
  {{- end }}
  {{- with $v.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    runAsNonRoot: true
    capabilities: {drop: [ALL]}
  volumeMounts:
  - name: policy
    mountPath: /policy-dir
    readOnly: true
volumes:
- name: policy
  configMap:
    name: {{ include "headroom.descheduler.policyConfigMapName" .root }}
{{- end -}}
