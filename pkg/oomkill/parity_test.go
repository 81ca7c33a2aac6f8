package oomkill

import (
	"math"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	resourcehelper "k8s.io/component-helpers/resource"
	v1qos "k8s.io/kubernetes/pkg/apis/core/v1/helper/qos"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/qos"
)

// parityMemory draws a memory quantity for a node of the given capacity:
// unset, tiny, up to the capacity, beyond it, absurd, or beyond int64.
func parityMemory(r *rand.Rand, capacity int64) (resource.Quantity, bool) {
	switch r.IntN(12) {
	case 0:
		return resource.Quantity{}, false
	case 1:
		return bytesQ(0), true
	case 2: // below capacity/1000: the kubelet's adj is 999 whatever the value
		return bytesQ(1 + r.Int64N(max(capacity/1000, 1))), true
	case 3, 4, 5:
		return bytesQ(mulDiv(capacity, r.Int64N(1001), 1000)), true
	case 6:
		return bytesQ(capacity), true
	case 7, 8: // beyond the capacity, up to 4×
		return bytesQ(addSat(capacity, mulDiv(capacity, r.Int64N(3001), 1000))), true
	case 9: // absurd: overflows 1000 × request
		return bytesQ(math.MaxInt64 - r.Int64N(math.MaxInt64/2)), true
	case 10:
		return bytesQ(safeSum/2 + r.Int64N(safeSum)), true
	default: // beyond int64, where Quantity.Value is meaningless
		return resource.MustParse([]string{"10E", "1e30", "9.3E"}[r.IntN(3)]), true
	}
}

// parityPod draws a pod of random QoS shape with regular, init and sidecar
// containers, optional pod-level resources and optional node criticality.
func parityPod(r *rand.Rand, capacity int64) *corev1.Pod {
	pod := testPod("ns", "p")
	shape := r.IntN(3) // BestEffort, Guaranteed, Burstable
	container := func(name string) corev1.Container {
		c := corev1.Container{Name: name}
		switch shape {
		case 1:
			q, ok := parityMemory(r, capacity)
			if !ok || q.Sign() <= 0 {
				q = bytesQ(max(capacity/2, 1))
			}
			c.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: q, corev1.ResourceCPU: resource.MustParse("1")}
			c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: q, corev1.ResourceCPU: resource.MustParse("1")}
		case 2:
			c.Resources.Requests = corev1.ResourceList{}
			c.Resources.Limits = corev1.ResourceList{}
			if q, ok := parityMemory(r, capacity); ok {
				c.Resources.Requests[corev1.ResourceMemory] = q
			}
			if q, ok := parityMemory(r, capacity); ok {
				c.Resources.Limits[corev1.ResourceMemory] = q
			}
		}
		return c
	}
	for i := range 1 + r.IntN(3) {
		pod.Spec.Containers = append(pod.Spec.Containers, container(string(rune('a'+i))))
	}
	for i := range r.IntN(3) {
		c := container(string(rune('p' + i)))
		if r.IntN(2) == 0 {
			always := corev1.ContainerRestartPolicyAlways
			c.RestartPolicy = &always
		}
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, c)
	}
	if r.IntN(4) == 0 {
		agg := memoryOf(resourcehelper.AggregateContainerRequests(pod, resourcehelper.PodResourcesOptions{}))
		var request resource.Quantity
		switch r.IntN(6) {
		case 0: // below the containers' requests: the API rejects it
			request = bytesQ(r.Int64N(max(agg, 1)))
		case 1:
			request, _ = parityMemory(r, capacity)
		default: // the containers' requests plus an unassigned remainder
			extra, _ := parityMemory(r, capacity)
			request = bytesQ(addSat(agg, bytesOf(extra)))
		}
		pod.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: request}}
		if r.IntN(2) == 0 {
			pod.Spec.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: request}
		}
	}
	if r.IntN(20) == 0 {
		priority := int32(2000001000)
		pod.Spec.Priority = &priority
		pod.Spec.PriorityClassName = "system-node-critical"
	}
	if r.IntN(2) == 0 {
		pod.Status.QOSClass = v1qos.ComputePodQOS(pod)
	}
	return pod
}

func parityCapacity(r *rand.Rand) int64 {
	switch r.IntN(8) {
	case 0:
		return Mi
	case 1, 2, 3:
		return Mi<<r.IntN(35) + r.Int64N(Mi)
	case 4:
		return 1 + r.Int64N(64*Gi)
	case 5:
		return []int64{1 << 50, safeSum, math.MaxInt64 / 1000}[r.IntN(3)]
	case 6:
		return math.MaxInt64
	default:
		return 1 + r.Int64N(math.MaxInt64)
	}
}

// podLevelShareValid reports whether the pod-level memory request, if any,
// covers the containers' requests, as the API requires.
func podLevelShareValid(pod *corev1.Pod) bool {
	if pod.Spec.Resources == nil {
		return true
	}
	q, ok := pod.Spec.Resources.Requests[corev1.ResourceMemory]
	if !ok || q.Sign() == 0 {
		return true
	}
	return bytesOf(q) >= memoryOf(resourcehelper.AggregateContainerRequests(pod, resourcehelper.PodResourcesOptions{}))
}

func hasPodLevelMemoryRequest(pod *corev1.Pod) bool {
	if pod.Spec.Resources == nil {
		return false
	}
	_, ok := pod.Spec.Resources.Requests[corev1.ResourceMemory]
	return ok
}

// TestAdjParity checks the adj the model uses against the kubelet's
// qos.GetContainerOOMScoreAdjust on thousands of random pods and capacities.
func TestAdjParity(t *testing.T) {
	if !utilfeature.DefaultFeatureGate.Enabled(features.PodLevelResources) {
		t.Fatal("PodLevelResources is expected on by default in Kubernetes 1.36")
	}
	r := rand.New(rand.NewPCG(1, 2))
	var exact, oversize, oversizeUnsafe, normalized, normalizedOversize int
	for range 5000 {
		capacity := parityCapacity(r)
		pod := parityPod(r, capacity)
		n := mustNode(t, testNode("n", capacity, capacity), []*corev1.Pod{pod}, DefaultEstimate)
		refs := refsOf(pod, nil)
		byName := map[string]Victim{}
		for _, v := range n.KillOrder() {
			byName[v.Container] = v
		}
		if len(byName) != len(refs) {
			t.Fatalf("model holds %d containers, pod has %d considered", len(byName), len(refs))
		}
		safe := withinSafeRange(pod)
		class := v1qos.GetPodQOS(pod)
		critical := pod.Spec.Priority != nil
		valid := podLevelShareValid(pod)
		for _, ref := range refs {
			c := ref.of(pod)
			got := byName[c.Name].Adj

			// 1. Where the kubelet's arithmetic cannot overflow, the model
			// uses its value on the original pod, whatever the requests.
			if safe {
				exact++
				if want := qos.GetContainerOOMScoreAdjust(pod, c, capacity); got != want {
					t.Fatalf("capacity %d, pod %+v, container %s: adj %d, kubelet %d", capacity, pod.Spec, c.Name, got, want)
				}
			}

			// 2. A Burstable container requesting at least the capacity gets
			// the clamp value 3, overflow or not.
			request := memoryOf(c.Resources.Requests)
			if class == corev1.PodQOSBurstable && !critical && !hasPodLevelMemoryRequest(pod) && request >= capacity {
				oversize++
				if !safe {
					oversizeUnsafe++
				}
				if got != 3 {
					t.Fatalf("capacity %d, request %d (safe %v): adj %d, want 3", capacity, request, safe, got)
				}
			}

			// 3. The range the kubelet promises per class.
			switch {
			case critical || class == corev1.PodQOSGuaranteed:
				if got != -997 {
					t.Fatalf("%s critical=%v: adj %d, want -997", class, critical, got)
				}
			case class == corev1.PodQOSBestEffort:
				if got != 1000 {
					t.Fatalf("BestEffort: adj %d, want 1000", got)
				}
			case valid && (got < 3 || got > 999):
				t.Fatalf("Burstable: adj %d outside [3, 999]", got)
			}

			// 4. Normalizing (clamping requests to the capacity, keeping the
			// pod-level share) changes nothing where the original computes
			// exactly: this is why the normalized copy is sound where the
			// original would overflow.
			containers := int64(len(pod.Spec.Containers) + len(pod.Spec.InitContainers))
			if safe && valid && capacity <= safeSum/(3*containers) {
				normalized++
				if request > capacity {
					normalizedOversize++
				}
				cp, c2 := normalize(pod, capacity)
				if c2 != capacity {
					t.Fatalf("capacity %d scaled to %d", capacity, c2)
				}
				if got, want := qos.GetContainerOOMScoreAdjust(cp, ref.of(cp), c2), qos.GetContainerOOMScoreAdjust(pod, c, capacity); got != want {
					t.Fatalf("capacity %d, pod %+v, container %s: normalized adj %d, original %d", capacity, pod.Spec, c.Name, got, want)
				}
			}
		}
	}
	t.Logf("exact %d, oversize %d (of which beyond the safe range %d), normalized %d (of which oversize %d)",
		exact, oversize, oversizeUnsafe, normalized, normalizedOversize)
	if exact < 3000 || oversize < 300 || oversizeUnsafe < 50 || normalized < 2000 || normalizedOversize < 200 {
		t.Fatal("the random pods no longer cover every case")
	}
}

// TestAdjOverflowGuard shows the failure the guard exists for: the kubelet's
// 1000 × request wraps around for absurd requests.
func TestAdjOverflowGuard(t *testing.T) {
	// 1000·2⁶² ≡ 0 (mod 2⁶⁴): the kubelet computes 1000 − 0 → 999, the most
	// killable Burstable value, for a request 65536 times the node.
	pod := burstable("huge", 1<<62, 0)
	if got := qos.GetContainerOOMScoreAdjust(pod, &pod.Spec.Containers[0], 64*Gi); got != 999 {
		t.Fatalf("kubelet adj %d; the overflow this test documents is gone", got)
	}
	n := mustNode(t, testNode("n", 64*Gi, 60*Gi), []*corev1.Pod{pod}, DefaultEstimate)
	if got := n.KillOrder()[0].Adj; got != 3 {
		t.Fatalf("model adj %d, want 3", got)
	}

	// A pod-level request beyond int64 makes every container's share exceed
	// the capacity: all get 3.
	p := testPod("default", "p", ctr{name: "a", req: Gi, lim: 2 * Gi}, ctr{name: "b", req: Mi, lim: 2 * Gi})
	p.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1e30")}}
	n = mustNode(t, testNode("n", 64*Gi, 60*Gi), []*corev1.Pod{p}, DefaultEstimate)
	for _, v := range n.KillOrder() {
		if v.Adj != 3 {
			t.Errorf("%s: adj %d, want 3", v.Container, v.Adj)
		}
	}

	// Capacities beyond safeSum scale down instead of overflowing.
	n = mustNode(t, testNode("n", math.MaxInt64, math.MaxInt64), []*corev1.Pod{burstable("x", math.MaxInt64/2, 0)}, DefaultEstimate)
	if got := n.KillOrder()[0].Adj; got != 500 && got != 501 {
		t.Fatalf("half of an int64-sized node: adj %d, want 500 or 501", got)
	}
}

// TestNormalizeKeepsPodLevelShare is why normalize rewrites the pod-level
// request instead of clamping it to the capacity like the others.
func TestNormalizeKeepsPodLevelShare(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.PodLevelResources, true)
	const capacity = 64 * Gi
	// a requests 2× the node, b nothing, the pod 3× the node: b's share is
	// (3C − 2C) / 2 = C/2, adj 1000 − 500 = 500. Clamping the pod-level
	// request to C would give b a share of 0 and adj 999.
	pod := testPod("default", "p", ctr{name: "a", req: 2 * capacity}, ctr{name: "b"})
	pod.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: bytesQ(3 * capacity)}}
	b := &pod.Spec.Containers[1]
	if got := qos.GetContainerOOMScoreAdjust(pod, b, capacity); got != 500 {
		t.Fatalf("kubelet adj %d, want 500", got)
	}
	naive := pod.DeepCopy()
	naive.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = bytesQ(capacity)
	naive.Spec.Resources.Requests[corev1.ResourceMemory] = bytesQ(capacity)
	if got := qos.GetContainerOOMScoreAdjust(naive, &naive.Spec.Containers[1], capacity); got != 999 {
		t.Fatalf("naive clamp adj %d, want 999", got)
	}
	cp, c := normalize(pod, capacity)
	for i := range pod.Spec.Containers {
		if got, want := qos.GetContainerOOMScoreAdjust(cp, &cp.Spec.Containers[i], c), qos.GetContainerOOMScoreAdjust(pod, &pod.Spec.Containers[i], capacity); got != want {
			t.Errorf("container %d: normalized adj %d, kubelet %d", i, got, want)
		}
	}
}
