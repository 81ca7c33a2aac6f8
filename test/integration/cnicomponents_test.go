package integration

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestNodeAgentCNIComponents holds the opt-in components for the CNIs whose
// pod-IP state the agent reads through another party, and the chart values
// that give the same, to each other and to their rights:
//   - scheduler/calico-ipam and descheduler/calico-ipam
//     ({scheduler,descheduler}.calicoIPAM): list and watch of Calico's
//     three IPAM resources for headroom-scheduler (NodeIPs' ipSource:
//     CalicoIPAM) and headroom-descheduler (RelieveNodePressure's), nothing
//     else; the
//     agent's own Calico reads (nodeAgent.calicoIPAM) are refused;
//   - cilium-agent (nodeAgent.ciliumAgent): the Cilium agent's socket
//     directory, read-only, type Directory, group 0, the flag naming the
//     socket, and still non-root.
func TestNodeAgentCNIComponents(t *testing.T) {
	const ds = "DaemonSet " + chartNS + "/headroom-node-agent"
	shipped := renderKustomize(t)
	// The agent's own Calico reads are gone: the chart refuses their key,
	// saying what replaces it.
	if _, err := renderChartText(t, "-f", valuesFile(t, "nodeAgent: {calicoIPAM: {enabled: true}}")); err == nil ||
		!strings.Contains(err.Error(), "scheduler.calicoIPAM") {
		t.Errorf("nodeAgent.calicoIPAM rendered (%v), want it refused naming scheduler.calicoIPAM", err)
	}

	// The scheduler's and the descheduler's reads for their ipSource
	// CalicoIPAM ({scheduler,descheduler}.calicoIPAM): the same rule, the
	// component's ServiceAccount, its Deployment unchanged.
	for _, c := range []struct{ component, values string }{
		{"scheduler", "scheduler: {calicoIPAM: {enabled: true}}"},
		{"descheduler", "descheduler: {mode: deployment, calicoIPAM: {enabled: true}}"},
	} {
		t.Run(c.component+" calico-ipam", func(t *testing.T) {
			sa := "headroom-" + c.component
			role, binding := "ClusterRole "+sa+"-calico-ipam", "ClusterRoleBinding "+sa+"-calico-ipam"
			if _, ok := shipped[role]; ok {
				t.Fatalf("%s is shipped by default; it is opt-in", role)
			}
			kustomize := renderKustomizeWith(t, c.component+"/calico-ipam")
			chart := renderChart(t, "-f", valuesFile(t, c.values))
			pick := func(objs map[string]object) map[string]object {
				return map[string]object{role: objs[role], binding: objs[binding]}
			}
			compareObjects(t, pick(kustomize), pick(chart))
			rules, _ := kustomize[role]["rules"].([]any)
			if len(rules) != 1 {
				t.Fatalf("%s rules %v, want one", role, rules)
			}
			r := rules[0].(map[string]any)
			if !equalStrings(r["apiGroups"], "crd.projectcalico.org") || !equalStrings(r["resources"], "ipamblocks", "ippools", "ipamconfigs") ||
				!equalStrings(r["verbs"], "list", "watch") {
				t.Errorf("%s rule %v, want list and watch of ipamblocks, ippools, ipamconfigs in crd.projectcalico.org", role, r)
			}
			subjects, _ := kustomize[binding]["subjects"].([]any)
			if len(subjects) != 1 || subjects[0].(map[string]any)["name"] != sa {
				t.Errorf("%s subjects %v, want the %s ServiceAccount", binding, subjects, sa)
			}
		})
	}

	t.Run("cilium-agent", func(t *testing.T) {
		kustomize := renderKustomizeWith(t, "node-agent/cilium-agent")
		chart := renderChart(t, "-f", valuesFile(t, "nodeAgent: {ciliumAgent: {enabled: true}}"))
		compareObjects(t, map[string]object{ds: kustomize[ds]}, map[string]object{ds: chart[ds]})
		spec := decodeTyped[*appsv1.DaemonSet](t, kustomize, ds).Spec.Template.Spec
		c := spec.Containers[0]
		if !slices.Contains(c.Args, "--cilium-agent-socket=/var/run/cilium/cilium.sock") {
			t.Errorf("args %v lack --cilium-agent-socket", c.Args)
		}
		var vol *corev1.HostPathVolumeSource
		for _, v := range spec.Volumes {
			if v.Name == "cilium-run" {
				vol = v.HostPath
			}
		}
		if vol == nil || vol.Path != "/var/run/cilium" || vol.Type == nil || *vol.Type != corev1.HostPathDirectory {
			t.Errorf("cilium-run volume %+v, want the directory /var/run/cilium, type Directory", vol)
		}
		var mounted bool
		for _, m := range c.VolumeMounts {
			if m.Name == "cilium-run" {
				mounted = m.ReadOnly && m.MountPath == "/var/run/cilium"
			}
		}
		if !mounted {
			t.Errorf("cilium-run not mounted read-only at /var/run/cilium: %+v", c.VolumeMounts)
		}
		psc := spec.SecurityContext
		if !slices.Equal(psc.SupplementalGroups, []int64{0}) || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
			t.Errorf("pod security context %+v, want non-root with group 0 for the socket", psc)
		}
	})
}

func equalStrings(v any, want ...string) bool {
	l, _ := v.([]any)
	if len(l) != len(want) {
		return false
	}
	for i, s := range l {
		if s != want[i] {
			return false
		}
	}
	return true
}
