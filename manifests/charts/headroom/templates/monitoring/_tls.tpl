{{/*
Serving certificates from cert-manager (metrics.certManager.enabled): each
component that serves /metrics (headroom.metricsTargets) gets a Certificate
<name>-metrics-tls for its Service's names, serves /metrics with it in place
of the certificate it signs itself at start, and the monitors verify it with
the issuer's CA (ca.crt of the same Secret).
*/}}

{{/* "true" where component .name serves /metrics with a cert-manager certificate. */}}
{{- define "headroom.metricsTLS.on" -}}
{{- if and .root.Values.metrics.certManager.enabled (has .name (include "headroom.metricsTargets" .root | fromYamlArray)) -}}true{{- end -}}
{{- end -}}

{{- define "headroom.metricsTLS.secretName" -}}{{ .name }}-metrics-tls{{- end -}}

{{/* The name the certificate holds and the monitors verify. */}}
{{- define "headroom.metricsTLS.serverName" -}}{{ .name }}-metrics.{{ .root.Release.Namespace }}.svc{{- end -}}

{{- define "headroom.metricsTLS.mountPath" -}}/etc/headroom/metrics-tls{{- end -}}

{{/* The container args: serve with the mounted certificate. */}}
{{- define "headroom.metricsTLS.args" -}}
{{- if include "headroom.metricsTLS.on" . }}
- --tls-cert-file={{ include "headroom.metricsTLS.mountPath" . }}/tls.crt
- --tls-private-key-file={{ include "headroom.metricsTLS.mountPath" . }}/tls.key
{{- end }}
{{- end -}}

{{- define "headroom.metricsTLS.volumeMount" -}}
{{- if include "headroom.metricsTLS.on" . }}
- name: metrics-tls
  mountPath: {{ include "headroom.metricsTLS.mountPath" . }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "headroom.metricsTLS.volume" -}}
{{- if include "headroom.metricsTLS.on" . }}
- name: metrics-tls
  secret:
    secretName: {{ include "headroom.metricsTLS.secretName" . }}
{{- end }}
{{- end -}}
