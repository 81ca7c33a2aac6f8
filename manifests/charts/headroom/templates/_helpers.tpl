{{/*
Image reference of a component: registry/repository@digest where
image.digest is set (it wins over the tag), else registry/repository:tag,
the tag defaulting to the one Headroom's images carry for the cluster's
Kubernetes minor (headroom.minorTag). Argument: dict "image"
.Values.<component>.image "root" $.
*/}}
{{- define "headroom.image" -}}
{{- $repo := .image.repository -}}
{{- if .image.registry -}}
{{- $repo = printf "%s/%s" .image.registry .image.repository -}}
{{- end -}}
{{- if .image.digest -}}
{{ $repo }}@{{ .image.digest }}
{{- else -}}
{{ $repo }}:{{ .image.tag | default (include "headroom.minorTag" .root) }}
{{- end -}}
{{- end -}}

{{/*
The Kubernetes minor of the cluster, e.g. 1.35, from
.Capabilities.KubeVersion (the API server's with helm install, --kube-version
with helm template). From the full version: a provider's Minor may read "35+".
*/}}
{{- define "headroom.kubeMinor" -}}
{{- $v := semver .Capabilities.KubeVersion.Version -}}
{{- printf "%d.%d" $v.Major $v.Minor -}}
{{- end -}}

{{/*
The tag of Headroom's images built for the cluster's minor
(templates/_minors.tpl, generated from hack/k8s-minors.txt). Chart.yaml's
kubeVersion already refuses other minors; this says the same to tools that
render without that check. Argument: $.
*/}}
{{- define "headroom.minorTag" -}}
{{- $tags := include "headroom.minorTags" . | fromYaml -}}
{{- $minor := include "headroom.kubeMinor" . -}}
{{- $tag := get $tags $minor -}}
{{- if not $tag -}}
{{- fail (printf "Headroom %s is built for Kubernetes %s; this cluster is %s: install it on one of those minors" .Chart.AppVersion (keys $tags | sortAlpha | join ", ") .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- $tag -}}
{{- end -}}

{{/*
imagePullSecrets of a pod spec, where .Values.imagePullSecrets has any.
Argument: $.
*/}}
{{- define "headroom.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{- toYaml . | nindent 0 }}
{{- end }}
{{- end -}}

{{/*
image: and, when set, imagePullPolicy: of a container.
*/}}
{{- define "headroom.containerImage" -}}
image: {{ include "headroom.image" . }}
{{- with .image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- end -}}

{{/*
Deep merge of .src into the map .dst, in place: maps merge key by key, every
other value (lists included) replaces the one in .dst. Unlike sprig's
mergeOverwrite, false, 0 and "" replace too.
*/}}
{{- define "headroom.merge" -}}
{{- $dst := .dst -}}
{{- range $k, $v := .src -}}
{{- if and (kindIs "map" $v) (kindIs "map" (get $dst $k)) -}}
{{- include "headroom.merge" (dict "dst" (get $dst $k) "src" $v) -}}
{{- else -}}
{{- $_ := set $dst $k $v -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
A component configuration file (KubeSchedulerConfiguration,
DeschedulerPolicy) as text. Arguments:
  component  the values key of the component (scheduler, descheduler)
  field      the values key of the file (config, policy)
  config     the value given: "" (use default), a YAML string or an object
  default    the shipped file's text
  profile    merged into every entry of profiles
  pluginArgs plugin name -> args, merged into the pluginConfig entries
Without overrides the text is the given (or shipped) one, byte for byte.
*/}}
{{- define "headroom.configText" -}}
{{- $text := "" -}}
{{- if kindIs "string" .config -}}
{{- $text = .config | default .default -}}
{{- else if kindIs "map" .config -}}
{{- $text = printf "%s\n" (toYaml .config) -}}
{{- else -}}
{{- fail (printf "%s.%s must be a YAML string or an object, not %s" .component .field (kindOf .config)) -}}
{{- end -}}
{{- if or .profile .pluginArgs -}}
{{- $obj := fromYaml $text -}}
{{- if hasKey $obj "Error" -}}
{{- fail (printf "%s.%s is not valid YAML: %s" .component .field $obj.Error) -}}
{{- end -}}
{{- if not (kindIs "slice" $obj.profiles) -}}
{{- fail (printf "%s.%s has no profiles list to apply %s.profile or %s.pluginArgs to" .component .field .component .component) -}}
{{- end -}}
{{- $root := . -}}
{{- range $i, $p := $obj.profiles -}}
{{- if not (kindIs "map" $p) -}}
{{- fail (printf "%s.%s: profiles[%d] is not an object" $root.component $root.field $i) -}}
{{- end -}}
{{- include "headroom.merge" (dict "dst" $p "src" (deepCopy $root.profile)) -}}
{{- range $name, $args := $root.pluginArgs -}}
{{- if not (kindIs "map" $args) -}}
{{- fail (printf "%s.pluginArgs.%s must be an object, not %s" $root.component $name (kindOf $args)) -}}
{{- end -}}
{{- $found := false -}}
{{- range $pc := ($p.pluginConfig | default list) -}}
{{- if eq $pc.name $name -}}
{{- $found = true -}}
{{- if not (kindIs "map" $pc.args) -}}
{{- $_ := set $pc "args" dict -}}
{{- end -}}
{{- include "headroom.merge" (dict "dst" $pc.args "src" (deepCopy $args)) -}}
{{- end -}}
{{- end -}}
{{- if not $found -}}
{{- $_ := set $p "pluginConfig" (append ($p.pluginConfig | default list) (dict "name" $name "args" (deepCopy $args))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $text = printf "%s\n" (toYaml $obj) -}}
{{- end -}}
{{- $text -}}
{{- end -}}

{{- define "headroom.scheduler.config" -}}
{{- include "headroom.pidFloor.checkArgs" (dict "name" "scheduler.pluginArgs.NodePIDs" "args" (get .Values.scheduler.pluginArgs "NodePIDs") "floor" .Values.pidFloor) -}}
{{- $text := include "headroom.configText" (dict
  "component" "scheduler" "field" "config"
  "config" .Values.scheduler.config
  "default" (.Files.Get "files/scheduler-config.yaml")
  "profile" .Values.scheduler.profile
  "pluginArgs" .Values.scheduler.pluginArgs) -}}
{{- include "headroom.pidFloor" (dict
  "text" $text "name" "scheduler.config" "plugin" "NodePIDs" "nested" ""
  "floor" .Values.pidFloor "strict" (not (empty .Values.scheduler.config)) "add" true) -}}
{{- end -}}

{{/*
The PID floor NodePIDs and RelieveNodePressure share (pidFloor: minFreePIDs,
minFreePercent), put into a component's configuration text. The
descheduler refuses to start when its floor is not the scheduler's
(schedulerConfigFile), so the chart takes both from the one value.
Arguments:
  text    the configuration, after profile and pluginArgs
  name    the value it came from, for errors
  plugin  NodePIDs (the floor in its args) or RelieveNodePressure (in args.pids)
  nested  "" or "pids"
  floor   .Values.pidFloor
  strict  the text is the user's own (scheduler.config, descheduler.policy):
          a floor there that differs from pidFloor fails the render, naming
          both; the shipped files take pidFloor
  add     add a pluginConfig entry with the floor to profiles without one
          (NodePIDs: its defaults would apply there)
The text comes back byte for byte where it already holds the floor.
*/}}
{{- define "headroom.pidFloor" -}}
{{- $root := . -}}
{{- $obj := fromYaml .text -}}
{{- $changed := false -}}
{{- range $i, $p := ($obj.profiles | default list) -}}
{{- $found := false -}}
{{- range $pc := ($p.pluginConfig | default list) -}}
{{- if and (kindIs "map" $pc) (eq (toString $pc.name) $root.plugin) -}}
{{- $found = true -}}
{{- if not (kindIs "map" $pc.args) -}}
{{- $_ := set $pc "args" dict -}}
{{- end -}}
{{- $target := $pc.args -}}
{{- if $root.nested -}}
{{- /* pids: null turns the PID trigger off: no floor to set. */ -}}
{{- if and (hasKey $pc.args $root.nested) (not (get $pc.args $root.nested)) -}}
{{- $target = dict -}}
{{- else -}}
{{- if not (kindIs "map" (get $pc.args $root.nested)) -}}
{{- $_ := set $pc.args $root.nested dict -}}
{{- end -}}
{{- $target = get $pc.args $root.nested -}}
{{- end -}}
{{- end -}}
{{- range $k := list "minFreePIDs" "minFreePercent" -}}
{{- $want := toString (get $root.floor $k) -}}
{{- if not (hasKey $target $k) -}}
{{- $_ := set $target $k (get $root.floor $k) -}}
{{- $changed = true -}}
{{- else if ne (toString (get $target $k)) $want -}}
{{- if $root.strict -}}
{{- fail (printf "%s: %s's %s%s is %v in profile %d, pidFloor.%s is %s: the scheduler's NodePIDs and the descheduler's RelieveNodePressure must share the floor; set pidFloor.%s (it is rendered into both)" $root.name $root.plugin (ternary (printf "%s." $root.nested) "" (ne $root.nested "")) $k (get $target $k) $i $k $want $k) -}}
{{- end -}}
{{- $_ := set $target $k (get $root.floor $k) -}}
{{- $changed = true -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and (not $found) $root.add (kindIs "map" $p) -}}
{{- $_ := set $p "pluginConfig" (append ($p.pluginConfig | default list) (dict "name" $root.plugin "args" (dict "minFreePIDs" $root.floor.minFreePIDs "minFreePercent" $root.floor.minFreePercent))) -}}
{{- $changed = true -}}
{{- end -}}
{{- end -}}
{{- if $changed -}}
{{- printf "%s\n" (toYaml $obj) -}}
{{- else -}}
{{- .text -}}
{{- end -}}
{{- end -}}

{{/*
A component's pluginArgs that set the PID floor must agree with pidFloor.
Arguments: name (the value), args (the plugin's args, or nil), floor.
*/}}
{{- define "headroom.pidFloor.checkArgs" -}}
{{- if kindIs "map" .args -}}
{{- range $k := list "minFreePIDs" "minFreePercent" -}}
{{- if and (hasKey $.args $k) (ne (toString (get $.args $k)) (toString (get $.floor $k))) -}}
{{- fail (printf "%s.%s is %v, pidFloor.%s is %v: the scheduler's NodePIDs and the descheduler's RelieveNodePressure share the PID floor; set pidFloor.%s (it is rendered into both)" $.name $k (get $.args $k) $k (get $.floor $k) $k) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Leader-election flags of headroom-scheduler: none when its configuration
already elects on the Lease <release namespace>/headroom-scheduler (the
shipped one does, in headroom-system), else the flags that put it there, the
Lease the leader-election Role grants. kube-scheduler applies these flags over
the file's leaderElection (--config honours the leader-election flags), so a
configuration of one's own or another release namespace never contends with
the default scheduler's kube-system/kube-scheduler.
*/}}
{{- define "headroom.scheduler.leaderElectionArgs" -}}
{{- $le := (fromYaml (include "headroom.scheduler.config" .)).leaderElection | default dict -}}
{{- if not (and (kindIs "map" $le) (eq (toString $le.resourceName) "headroom-scheduler") (eq (toString $le.resourceNamespace) .Release.Namespace)) }}
- --leader-elect-resource-name=headroom-scheduler
- --leader-elect-resource-namespace={{ .Release.Namespace }}
{{- end -}}
{{- end -}}

{{- define "headroom.descheduler.policy" -}}
{{- $pluginArgs := .Values.descheduler.pluginArgs -}}
{{- if ne .Release.Namespace "headroom-system" -}}
{{- /* The shipped policy names the state ConfigMap in headroom-system. */ -}}
{{- $state := dict "RelieveNodePressure" (dict "stateConfigMap" (printf "%s/headroom-descheduler-state" .Release.Namespace)) -}}
{{- $pluginArgs = mergeOverwrite $state (deepCopy $pluginArgs) -}}
{{- end -}}
{{- $rnp := get .Values.descheduler.pluginArgs "RelieveNodePressure" -}}
{{- if kindIs "map" $rnp -}}
{{- include "headroom.pidFloor.checkArgs" (dict "name" "descheduler.pluginArgs.RelieveNodePressure.pids" "args" (get $rnp "pids") "floor" .Values.pidFloor) -}}
{{- end -}}
{{- $text := include "headroom.configText" (dict
  "component" "descheduler" "field" "policy"
  "config" .Values.descheduler.policy
  "default" (.Files.Get "files/descheduler-policy.yaml")
  "profile" dict
  "pluginArgs" $pluginArgs) -}}
{{- $text = include "headroom.pidFloor" (dict
  "text" $text "name" "descheduler.policy" "plugin" "RelieveNodePressure" "nested" "pids"
  "floor" .Values.pidFloor "strict" (not (empty .Values.descheduler.policy)) "add" false) -}}
{{- include "headroom.descheduler.schedulerNames" (dict "text" $text "name" (include "headroom.schedulerName" .)) -}}
{{- end -}}

{{/*
RelieveNodePressure evicts only pods of its schedulerNames (default
[headroom-scheduler]), so that a replacement is placed by the scheduler
that sees the pressure: with a renamed scheduler, headroom-scheduler in
them (or their default) becomes the new name, other names stay. The text
comes back byte for byte with the default name. Arguments: dict "text"
<policy> "name" <scheduler name>.
*/}}
{{- define "headroom.descheduler.schedulerNames" -}}
{{- if eq .name "headroom-scheduler" -}}
{{- .text -}}
{{- else -}}
{{- $root := . -}}
{{- $obj := fromYaml .text -}}
{{- range $p := ($obj.profiles | default list) -}}
{{- range $pc := (and (kindIs "map" $p) $p.pluginConfig | default list) -}}
{{- if and (kindIs "map" $pc) (eq (toString $pc.name) "RelieveNodePressure") -}}
{{- if not (kindIs "map" $pc.args) -}}
{{- $_ := set $pc "args" dict -}}
{{- end -}}
{{- $names := list -}}
{{- range $n := ($pc.args.schedulerNames | default (list "headroom-scheduler")) -}}
{{- $names = append $names (ternary $root.name $n (eq (toString $n) "headroom-scheduler")) -}}
{{- end -}}
{{- $_ := set $pc.args "schedulerNames" (uniq $names) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- printf "%s\n" (toYaml $obj) -}}
{{- end -}}
{{- end -}}

{{/*
Name of a ConfigMap as kustomize's configMapGenerator names it: the name, a
dash and the hash kustomize computes (sigs.k8s.io/kustomize/api/hasher): the
first 10 hex digits of the SHA-256 of the JSON {"data":...,"kind":"ConfigMap","name":""}
with 0, 1, 3, a, e spelled g, h, k, m, t. ("name" is empty: kustomize looks
the name up with the path "metadata/name" as one field, which finds none.)
A changed file gives a new name, so the pods that mount it roll.
Arguments: dict "name" "data" (a map).
*/}}
{{- define "headroom.configMapName" -}}
{{- $hash := dict "data" .data "kind" "ConfigMap" "name" "" | toJson | sha256sum | trunc 10 -}}
{{- printf "%s-%s" .name ($hash | replace "0" "g" | replace "1" "h" | replace "3" "k" | replace "a" "m" | replace "e" "t") -}}
{{- end -}}

{{- define "headroom.scheduler.configMapName" -}}
{{- include "headroom.configMapName" (dict "name" "headroom-scheduler-config" "data" (dict "scheduler-config.yaml" (include "headroom.scheduler.config" .))) -}}
{{- end -}}

{{- define "headroom.descheduler.policyConfigMapName" -}}
{{- include "headroom.configMapName" (dict "name" "headroom-descheduler-policy" "data" (dict "policy.yaml" (include "headroom.descheduler.policy" .))) -}}
{{- end -}}

{{/*
nodeSelector, affinity and tolerations of a pod spec, each where set.
Argument: the component's values.
*/}}
{{- define "headroom.placement" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
A ConfigMap data value holding the text exactly: a literal block where YAML
keeps such text byte for byte (one final newline, no leading blank, tab or
carriage return), otherwise a quoted string.
*/}}
{{- define "headroom.dataValue" -}}
{{- if and (hasSuffix "\n" .) (not (hasSuffix "\n\n" .)) (not (regexMatch "^[ \t\n]" .)) (not (contains "\r" .)) (not (contains "\t" .)) -}}
|
{{ . | trimSuffix "\n" }}
{{- else -}}
{{ toJson . }}
{{- end -}}
{{- end -}}

{{/*
The chart's standard labels of an object: app.kubernetes.io/name,
instance, version, component, part-of, managed-by, helm.sh/chart, then
commonLabels. Arguments: dict "root" $ "name" <app.kubernetes.io/name>
"component" <app.kubernetes.io/component>.
*/}}
{{- define "headroom.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ include "headroom.minorTag" .root | quote }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: headroom
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
An admission policy file of the kustomize tree, copied under files/ by
hack/update-chart.sh, rendered for the release: headroom-system, the
namespace of the shipped manifests, becomes the release namespace wherever
the file names it (the ServiceAccount it matches, the objects it allows),
and every object of the file gets the chart's standard labels. The render
fails when the file no longer matches the ServiceAccount, so that a renamed
one is never left unconfined. Arguments: dict "root" $ "file" <path in the
chart> "serviceAccount" <name in headroom-system> "component"
<app.kubernetes.io/component>; a policy that confines no ServiceAccount of
Headroom's (the kubelet's Events) gives "name" <app.kubernetes.io/name>
instead of "serviceAccount".
*/}}
{{- define "headroom.admissionPolicy" -}}
{{- $policy := .root.Files.Get .file }}
{{- if .serviceAccount }}
{{- $user := printf "system:serviceaccount:headroom-system:%s" .serviceAccount }}
{{- if not (contains (printf "'%s'" $user) $policy) }}
{{- fail (printf "%s no longer matches %s: update the chart's template of it" .file $user) }}
{{- end }}
{{- end }}
{{- $policy = $policy | replace "headroom-system" .root.Release.Namespace }}
{{- if .schedulerName }}
{{- /* The scheduler the policy hands pods to: the release's (headroom.schedulerName). */}}
{{- $policy = $policy | replace "'headroom-scheduler'" (printf "'%s'" .schedulerName) }}
{{- end }}
{{- if .serviceAccount }}
{{- /* A ServiceAccount of another name (<component>.serviceAccount.name) is the one confined. */}}
{{- $policy = $policy | replace (printf "'system:serviceaccount:%s:%s'" .root.Release.Namespace .serviceAccount) (printf "'system:serviceaccount:%s:%s'" .root.Release.Namespace (include "headroom.serviceAccountName" (dict "root" .root "component" .serviceAccountOf))) }}
{{- end }}
{{- if .lease }}
{{- /* The Lease of descheduler.leaderElection: the shipped one is <namespace>/<ServiceAccount>. */}}
{{- $shipped := printf "%s/%s" .root.Release.Namespace .serviceAccount }}
{{- if not (contains (printf "'%s'" $shipped) $policy) }}
{{- fail (printf "%s no longer names the Lease %s: update the chart's template of it" .file $shipped) }}
{{- end }}
{{- $policy = $policy | replace $shipped .lease }}
{{- end }}
{{- $labels := include "headroom.labels" (dict "root" .root "name" (.serviceAccount | default .name) "component" .component) | fromYaml }}
{{- range $doc := regexSplit "(?m)^---[ \t]*$" $policy -1 }}
{{- $obj := fromYaml $doc }}
{{- if $obj.kind }}
{{- $md := $obj.metadata }}
{{- $_ := set $md "labels" (mergeOverwrite (deepCopy $labels) ($md.labels | default dict)) }}
---
{{ toYaml $obj }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
The labels and annotations of a component's pod template: the standard
labels, then the component's podLabels, and its podAnnotations. podLabels
may not set app.kubernetes.io/name, the selector's label. Arguments: dict
"root" $ "name" <app.kubernetes.io/name> "component"
<app.kubernetes.io/component> "values" <the component's values>.
*/}}
{{- define "headroom.podMetadata" -}}
{{- if hasKey (.values.podLabels | default dict) "app.kubernetes.io/name" -}}
{{- fail (printf "podLabels of %s may not set app.kubernetes.io/name: the workload's selector matches it" .name) -}}
{{- end -}}
labels:
  {{- include "headroom.labels" (dict "root" .root "name" .name "component" .component) | nindent 2 }}
  {{- with .values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with .values.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
A securityContext: the shipped one (YAML text) with the component's
override merged over it, maps key by key, lists replaced, `key: null`
dropping a shipped key. An override that weakens it (privileged or
allowPrivilegeEscalation true, readOnlyRootFilesystem or runAsNonRoot
false, runAsUser 0, seccompProfile dropped or Unconfined, ALL no longer
dropped, capabilities added) fails the render unless the component's
allowWeakerSecurityContext is true, so that it is never weakened by
accident. Arguments: dict "defaults" <YAML>
"override" <map> "value" <the override's values path> "allowWeaker" bool.
*/}}
{{- define "headroom.securityContext" -}}
{{- $shipped := fromYaml .defaults | default dict -}}
{{- $merged := deepCopy $shipped -}}
{{- include "headroom.mergeDroppingNull" (dict "dst" $merged "src" (deepCopy (.override | default dict))) -}}
{{- if not .allowWeaker -}}
{{- $weaker := list -}}
{{- range $k, $hard := dict "privileged" false "allowPrivilegeEscalation" false "readOnlyRootFilesystem" true "runAsNonRoot" true -}}
{{- $was := toString (get $shipped $k) -}}
{{- $now := toString (get $merged $k) -}}
{{- if and (ne $now $was) (or (eq $was (toString $hard)) (and (hasKey $merged $k) (ne $now (toString $hard)))) -}}
{{- $weaker = append $weaker $k -}}
{{- end -}}
{{- end -}}
{{- if and (hasKey $merged "runAsUser") (eq (toString $merged.runAsUser) "0") (ne (toString $shipped.runAsUser) "0") -}}
{{- $weaker = append $weaker "runAsUser" -}}
{{- end -}}
{{- $seccomp := $merged.seccompProfile | default dict -}}
{{- if or (and (hasKey $shipped "seccompProfile") (not $merged.seccompProfile)) (eq (toString $seccomp.type) "Unconfined") -}}
{{- $weaker = append $weaker "seccompProfile" -}}
{{- end -}}
{{- $shippedCaps := $shipped.capabilities | default dict -}}
{{- $caps := $merged.capabilities | default dict -}}
{{- if or (and (has "ALL" ($shippedCaps.drop | default list)) (not (has "ALL" ($caps.drop | default list)))) (and $caps.add (ne (toJson $caps.add) (toJson $shippedCaps.add))) -}}
{{- $weaker = append $weaker "capabilities" -}}
{{- end -}}
{{- with $weaker -}}
{{- fail (printf "%s weakens the shipped securityContext (%s); set %s.allowWeakerSecurityContext=true to accept that" $.value (join ", " .) (first (splitList "." $.value))) -}}
{{- end -}}
{{- end -}}
{{- with $merged -}}
{{- toYaml . -}}
{{- end -}}
{{- end -}}

{{/*
headroom.merge, but a null in .src removes the key from .dst.
*/}}
{{- define "headroom.mergeDroppingNull" -}}
{{- $dst := .dst -}}
{{- range $k, $v := .src -}}
{{- if kindIs "invalid" $v -}}
{{- $_ := unset $dst $k -}}
{{- else if and (kindIs "map" $v) (kindIs "map" (get $dst $k)) -}}
{{- include "headroom.mergeDroppingNull" (dict "dst" (get $dst $k) "src" $v) -}}
{{- else -}}
{{- $_ := set $dst $k $v -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
A ServiceAccount's annotations, where serviceAccount.annotations has any.
Argument: the component's values.
*/}}
{{- define "headroom.serviceAccountAnnotations" -}}
{{- with (.serviceAccount | default dict).annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
The shipped container securityContext of the scheduler and the descheduler
(manifests/scheduler, manifests/descheduler).
*/}}
{{- define "headroom.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities: {drop: [ALL]}
{{- end -}}

{{/*
The node agent's view of the descheduler's PID trigger, from the policy the
chart renders (descheduler.policy and pluginArgs): RelieveNodePressure's
pids.thresholdPercent and pressureSamples, with the plugin's defaults (95,
2). The agent writes a sample above the threshold at once.
*/}}
{{- define "headroom.nodeAgent.pressureArgs" -}}
{{- $threshold := 95 -}}
{{- $samples := 2 -}}
{{- $policy := fromYaml (include "headroom.descheduler.policy" .) -}}
{{- range $p := ($policy.profiles | default list) -}}
{{- range $pc := ($p.pluginConfig | default list) -}}
{{- if and (kindIs "map" $pc) (eq (toString $pc.name) "RelieveNodePressure") (kindIs "map" $pc.args) -}}
{{- with $pc.args.pressureSamples }}{{ $samples = . }}{{ end -}}
{{- if kindIs "map" $pc.args.pids -}}
{{- with $pc.args.pids.thresholdPercent }}{{ $threshold = . }}{{ end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
- --pids-threshold-percent={{ $threshold }}
- --pressure-samples={{ $samples }}
{{- end -}}

{{/*
The scheduler's name: the schedulerName of the first profile of the
configuration the chart renders (scheduler.profile.schedulerName, or
scheduler.config's own), headroom-scheduler by default. Pods name it in
spec.schedulerName, which the API server holds to a DNS subdomain; the
descheduler policy, NOTES, the test pod, the alerts and the dashboard take
it from here, so that a renamed scheduler is renamed everywhere.
*/}}
{{- define "headroom.schedulerName" -}}
{{- $name := "headroom-scheduler" -}}
{{- with (fromYaml (include "headroom.scheduler.config" .)).profiles -}}
{{- if kindIs "map" (first .) -}}
{{- $name = (first .).schedulerName | default $name | toString -}}
{{- end -}}
{{- end -}}
{{- if or (gt (len $name) 253) (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$" $name)) -}}
{{- fail (printf "scheduler.profile.schedulerName %q is not a DNS subdomain (lower-case letters, digits, '-' and '.'), which a pod's spec.schedulerName must be" $name) -}}
{{- end -}}
{{- $name -}}
{{- end -}}

{{/*
A file of the kustomize tree that names the shipped scheduler,
headroom-scheduler, in queries and prose (the alerts, the dashboard), with
the scheduler's name of the release in its place: the exact quoted label
value ("headroom-scheduler" in PromQL, \"headroom-scheduler\" inside a JSON
string) and the phrases "schedulerName headroom-scheduler" and "pod(s) of
headroom-scheduler". Job and pod
patterns (job=~".*headroom-scheduler.*") name the Deployment and its
Service, whose names are fixed, and stay. The text comes back byte for byte
with the default name. Arguments: dict "root" $ "file" <path in the chart>.
*/}}
{{- define "headroom.withSchedulerName" -}}
{{- $text := .root.Files.Get .file -}}
{{- $name := include "headroom.schedulerName" .root -}}
{{- if ne $name "headroom-scheduler" -}}
{{- $text = $text | replace "\\\"headroom-scheduler\\\"" (printf "\\\"%s\\\"" $name) | replace "\"headroom-scheduler\"" (printf "%q" $name) -}}
{{- $text = regexReplaceAll "(schedulerName|pod\\(s\\) of)(\\s+)headroom-scheduler\\b" $text (printf "${1}${2}%s" $name) -}}
{{- end -}}
{{- $text -}}
{{- end -}}

{{/*
The ServiceAccount a component's pods run as: <component>.serviceAccount.name,
or the contract's name (headroom-scheduler, headroom-descheduler,
headroom-node-agent). The RBAC bindings and the admission policies that
confine the component name the same one. Arguments: dict "root" $
"component" <values key: scheduler, descheduler, nodeAgent>.
*/}}
{{- define "headroom.serviceAccountName" -}}
{{- $default := get (dict "scheduler" "headroom-scheduler" "descheduler" "headroom-descheduler" "nodeAgent" "headroom-node-agent") .component -}}
{{- $sa := (get .root.Values .component).serviceAccount | default dict -}}
{{- $sa.name | default $default -}}
{{- end -}}

{{/*
The namespace of the descheduler's leader-election Lease:
descheduler.leaderElection.leaseNamespace, or the release namespace.
*/}}
{{- define "headroom.descheduler.leaseNamespace" -}}
{{- .Values.descheduler.leaderElection.leaseNamespace | default .Release.Namespace -}}
{{- end -}}
