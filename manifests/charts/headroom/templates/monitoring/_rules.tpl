{{/*
Where each alert with a fixed threshold states it in
files/prometheus-rules.yaml: per alert, the shipped threshold and the text
(in expr, or in an annotation) that prometheusRule.alerts.<alert>.threshold
replaces, with format applied to the new threshold. The text must occur in
the shipped rule: the chart refuses to render otherwise, so that an edit of
the rule file cannot silently detach a value from its rule.
*/}}
{{- define "headroom.alertThresholds" -}}
HeadroomSchedulerPodsPending:
  shipped: 900
  sites:
  - {field: expr, text: ") > 900", format: ") > %v"}
  - {field: description, text: "created over 15 minutes ago", format: "created over %v seconds ago"}
HeadroomEvictionsHigh:
  shipped: 100
  sites:
  - {field: expr, text: "[1h])) > 100", format: "[1h])) > %v"}
  - {field: description, text: "More than 100 evictions", format: "More than %v evictions"}
HeadroomDeschedulerCronJobLate:
  shipped: 900
  sites:
  - {field: expr, text: "> 900", format: "> %v"}
HeadroomDeschedulerJobsFailed:
  shipped: 2
  sites:
  - {field: expr, text: ") >= 2", format: ") >= %v"}
{{- end -}}

{{/*
The spec of the PrometheusRule: the groups of files/prometheus-rules.yaml
(a copy of manifests/monitoring/prometheus-rules.yaml) with
prometheusRule's values applied to each alert: enabled false drops it (and
a group left empty), for, severity and threshold replace the shipped ones
(with the duration or threshold the annotations state), runbook_url points
into runbookBaseURL, additionalRuleLabels join every alert's labels. With
the default values it is the shipped file, object for object.
*/}}
{{- define "headroom.prometheusRuleSpec" -}}
{{- $p := .Values.prometheusRule }}
{{- /* The rules' text: the one place it is read. */}}
{{- $rulesText := include "headroom.withSchedulerName" (dict "root" . "file" "files/prometheus-rules.yaml") }}
{{- $shipped := $rulesText | fromYaml }}
{{- $thresholds := include "headroom.alertThresholds" . | fromYaml }}
{{- $base := $p.runbookBaseURL | default (printf "https://github.com/headroom-k8s/headroom/blob/%s/docs/troubleshooting.md" .Chart.AppVersion) }}
{{- $groups := list }}
{{- range $g := $shipped.groups }}
{{- $rules := list }}
{{- range $r := $g.rules }}
{{- if not $r.alert }}
{{- $rules = append $rules $r }}
{{- continue }}
{{- end }}
{{- $a := get ($p.alerts | default dict) $r.alert | default dict }}
{{- if and (hasKey $a "enabled") (not $a.enabled) }}
{{- continue }}
{{- end }}
{{- $r = deepCopy $r }}
{{- $ann := $r.annotations }}
{{- with $a.for }}
{{- if ne . ($r.for | default "0s") }}
{{- /* The annotations state the shipped for in minutes ("for 15 minutes"). */}}
{{- $old := printf "%s minutes" (trimSuffix "m" ($r.for | default "")) }}
{{- range $f := list "summary" "description" }}
{{- $_ := set $ann $f (get $ann $f | replace (printf "for %s" $old) (printf "for %s" $a.for) | replace (printf "For %s" $old) (printf "For %s" $a.for)) }}
{{- end }}
{{- if eq . "0s" }}
{{- $_ := unset $r "for" }}
{{- else }}
{{- $_ := set $r "for" . }}
{{- end }}
{{- end }}
{{- end }}
{{- with $a.severity }}
{{- $_ := set $r.labels "severity" . }}
{{- end }}
{{- with $p.additionalRuleLabels }}
{{- $_ := set $r "labels" (merge $r.labels .) }}
{{- end }}
{{- with get $thresholds $r.alert }}
{{- $t := . }}
{{- range $s := $t.sites }}
{{- $in := ternary $r.expr (get $ann $s.field) (eq $s.field "expr") }}
{{- if not (contains $s.text $in) }}
{{- fail (printf "files/prometheus-rules.yaml: %s's %s has no %q for prometheusRule.alerts.%s.threshold" $r.alert $s.field $s.text $r.alert) }}
{{- end }}
{{- if and (hasKey $a "threshold") (ne (toString $a.threshold) (toString $t.shipped)) }}
{{- $out := replace $s.text (printf $s.format $a.threshold) $in }}
{{- if eq $s.field "expr" }}
{{- $_ := set $r "expr" $out }}
{{- else }}
{{- $_ := set $ann $s.field $out }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- $_ := set $ann "runbook_url" (printf "%s#%s" $base (lower $r.alert)) }}
{{- $rules = append $rules $r }}
{{- end }}
{{- if $rules }}
{{- $groups = append $groups (set (deepCopy $g) "rules" $rules) }}
{{- end }}
{{- end }}
groups:
{{- toYaml $groups | nindent 0 }}
{{- end -}}
