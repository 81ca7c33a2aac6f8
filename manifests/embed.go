// Package manifests embeds the shipped configuration that programs use as
// their default, so that the default is the file users deploy.
package manifests

import _ "embed"

// SchedulerConfig is scheduler/scheduler-config.yaml: the
// KubeSchedulerConfiguration of the shipped headroom-scheduler.
//
//go:embed scheduler/scheduler-config.yaml
var SchedulerConfig []byte

// DeschedulerPolicy is descheduler/policy.yaml: the DeschedulerPolicy of
// the shipped headroom-descheduler.
//
//go:embed descheduler/policy.yaml
var DeschedulerPolicy []byte
