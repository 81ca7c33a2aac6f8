// Package manifests embeds the shipped configuration that programs use as
// their default, so that the default is the file users deploy.
package manifests

import _ "embed"

// SchedulerConfig is scheduler/scheduler-config.yaml: the
// KubeSchedulerConfiguration of the shipped headroom-scheduler.
//
//go:embed scheduler/scheduler-config.yaml
var SchedulerConfig []byte
