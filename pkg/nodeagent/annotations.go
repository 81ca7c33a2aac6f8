package nodeagent

import (
	"fmt"
	"time"

	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/pkg/memstats"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

// Caps of the values the agent writes, in bytes. They are the agent's own
// bounds, so that the admission policy can hold its ServiceAccount to them
// without ever refusing a write the agent means to make:
//
//   - an integer: at most 20 bytes, the longest base-10 64-bit integer
//     (18446744073709551615, or a sign and 19 digits). The agent's counts
//     are far smaller (PIDs at most 2^22, pod IPs at most 2^24), memory
//     in bytes fits 64 bits;
//   - a sample time: RFC 3339, which the agent writes in UTC to the second
//     (sample.FormatTime, 20 bytes, "2006-01-02T15:04:05Z"); the cap is the
//     longest form Go writes, with nanoseconds and a numeric offset
//     (time.RFC3339Nano, 35 bytes), which the readers accept as well;
//   - a per-pod list: at most 32 entries "<pod UID>=<figure>" (a 36-byte
//     UUID, "=", the figure) separated by commas. For pid-pods the figure
//     is at most 7 digits (2^22 = 4194304), pidstats.MaxPodListBytes in
//     all; for memory-pods, bytes held, at most 16 digits (memstats.MaxBytes
//     = 2^50 = 1125899906842624), memstats.PodListFormat.MaxBytes() in all;
//     swap-pods the same (memstats.SwapPodListFormat).
const (
	MaxIntegerBytes = 20
	MaxTimeBytes    = len(time.RFC3339Nano)
	// MaxPIDPodsBytes is pidstats.MaxPodListBytes: 32 × (36+1+7+1) − 1.
	MaxPIDPodsBytes = pidstats.MaxPodListBytes
	// MaxMemoryPodsBytes is memstats.PodListFormat.MaxBytes(),
	// 32 × (36+1+16+1) − 1.
	MaxMemoryPodsBytes = memstats.MaxListedPods*(36+len("=")+len("1125899906842624")+len(",")) - len(",")
)

// AnnotationCaps maps every Node annotation the agent may write to the
// longest value it may write there, in bytes. It is the one list the
// admission policy manifests/node-agent/admission-policy.yaml spells out
// (its variable headroomAnnotationCaps; TestAdmissionPolicyCaps holds the
// two together) and the agent checks before each write (CheckAnnotation):
// the policy refuses the agent's ServiceAccount any other headroom.dev/
// key and any longer value.
var AnnotationCaps = map[string]int{
	pidstats.AnnotationCapacity:  MaxIntegerBytes,
	pidstats.AnnotationReserved:  MaxIntegerBytes,
	pidstats.AnnotationUsed:      MaxIntegerBytes,
	pidstats.AnnotationSampledAt: MaxTimeBytes,
	pidstats.AnnotationPIDPods:   MaxPIDPodsBytes,
	ipstats.AnnotationCapacity:   MaxIntegerBytes,
	ipstats.AnnotationUsed:       MaxIntegerBytes,
	ipstats.AnnotationSampledAt:  MaxTimeBytes,
	ipstats.AnnotationLeaked:     MaxIntegerBytes,
	memstats.AnnotationUsed:      MaxIntegerBytes,
	memstats.AnnotationSampledAt: MaxTimeBytes,
	memstats.AnnotationPods:      MaxMemoryPodsBytes,
	memstats.AnnotationSwapTotal: MaxIntegerBytes,
	memstats.AnnotationSwapPods:  MaxMemoryPodsBytes,
}

// CheckAnnotation reports an error when the agent's admission policy would
// refuse to let it write value under key: a key not in AnnotationCaps, or a
// value longer than its cap.
func CheckAnnotation(key, value string) error {
	limit, ok := AnnotationCaps[key]
	if !ok {
		return fmt.Errorf("annotation %s is not one the node agent may write (nodeagent.AnnotationCaps)", key)
	}
	if len(value) > limit {
		return fmt.Errorf("annotation %s: %d bytes, more than the %d the node agent may write (nodeagent.AnnotationCaps)", key, len(value), limit)
	}
	return nil
}
