{{/*
The components whose /metrics the release serves, as a YAML list of
{name, ...}: the scheduler's secure port, every node agent, and the
descheduler in deployment mode (a CronJob run lives too briefly to scrape).
Each has a Service <name>-metrics and a container port named metrics, both
labelled and selected by app.kubernetes.io/name: <name>.
*/}}
{{- define "headroom.metricsTargets" -}}
{{- if .Values.scheduler.enabled }}
- headroom-scheduler
{{- end }}
{{- if .Values.nodeAgent.enabled }}
- headroom-node-agent
{{- end }}
{{- if and .Values.descheduler.enabled (eq .Values.descheduler.mode "deployment") }}
- headroom-descheduler
{{- end }}
{{- end -}}
