{{/*
The scrape settings a ServiceMonitor endpoint and a PodMonitor endpoint
share: port, path, scheme, interval, tlsConfig (verifying the serving
certificate once a CA is given), authorization and relabelings. Argument: dict "root" $ "monitor" <metrics.serviceMonitor or
metrics.podMonitor> "name" <the component>.
*/}}
{{- define "headroom.metricsEndpoint" -}}
{{- $m := .monitor -}}
port: metrics
path: /metrics
scheme: https
{{- with $m.interval }}
interval: {{ . }}
{{- end }}
{{- if include "headroom.metricsTLS.on" . }}
{{- /* The certificate cert-manager issued for the component, checked
with its issuer's CA. */}}
tlsConfig:
  ca:
    secret:
      name: {{ include "headroom.metricsTLS.secretName" . }}
      key: ca.crt
  serverName: {{ include "headroom.metricsTLS.serverName" . }}
{{- else }}
{{- with $m.tlsConfig }}
{{- $tls := deepCopy . }}
{{- /* A CA given means verify: drop the default insecureSkipVerify, which
Helm's merge of values would otherwise keep beside it. */}}
{{- if or $tls.ca $tls.caFile }}
{{- $_ := unset $tls "insecureSkipVerify" }}
{{- end }}
tlsConfig:
  {{- toYaml $tls | nindent 2 }}
{{- end }}
{{- end }}
authorization:
  {{- with $m.authorization }}
  {{- toYaml . | nindent 2 }}
  {{- else }}
  type: Bearer
  credentials: {name: headroom-metrics-reader, key: token}
  {{- end }}
{{- with $m.relabelings }}
relabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $m.metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
"true" where an enabled monitor scrapes with the chart's reader token (its
authorization is empty).
*/}}
{{- define "headroom.metricsReaderNeeded" -}}
{{- range $m := list .Values.metrics.serviceMonitor .Values.metrics.podMonitor -}}
{{- if and $m.enabled (empty $m.authorization) -}}true{{- end -}}
{{- end -}}
{{- end -}}
