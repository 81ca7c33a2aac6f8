package app

import (
	"context"
	"encoding/json"
	"github.com/headroom-k8s/headroom/test/kubectlout"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/descheduler/test"
	"sigs.k8s.io/yaml"

	"github.com/headroom-k8s/headroom/apis/kubectl/v1alpha1"
	"github.com/headroom-k8s/headroom/pkg/ipstarved"
	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

// evictionsCluster: "hot" reports 9900 of 10000 PIDs used (99 % > the
// shipped policy's 95 %); "cool" has room. On hot, in the order the plugin
// walks them:
//
//	bare      no owner, delete-priority 10: the evictor keeps it
//	legacy    placed by default-scheduler, delete-priority 9
//	solo      the only pod of its ReplicaSet: minReplicas 2 keeps it
//	young     started 2 minutes ago: minPodAge 10m keeps it
//	web-1..4  400 PIDs each, restarts 4..1: three go (9900 → 8700 ≤ 9000)
func evictionsCluster() *fake.Clientset {
	now := time.Now()
	sampled := pidstats.NodeStats{Capacity: 10000, Used: 9900, SampledAt: now.Add(-time.Minute)}
	hot := test.BuildTestNode("hot", 8000, 32<<30, 110, func(n *corev1.Node) { n.Annotations = sampled.Annotations() })
	cool := test.BuildTestNode("cool", 8000, 32<<30, 110, func(n *corev1.Node) {
		n.Annotations = pidstats.NodeStats{Capacity: 10000, Used: 1000, SampledAt: now.Add(-time.Minute)}.Annotations()
	})
	pod := func(name, owner string, age time.Duration, restarts int32, annotations map[string]string, edit func(*corev1.Pod)) *corev1.Pod {
		p := test.BuildTestPod(name, 100, 0, "hot", nil)
		p.UID = types.UID("uid-" + name)
		p.Spec.SchedulerName = "headroom-scheduler"
		p.CreationTimestamp = metav1.NewTime(now.Add(-age))
		p.Status.StartTime = &metav1.Time{Time: now.Add(-age)}
		p.Status.Phase = corev1.PodRunning
		// Scheduled before the sample: the sample counts its PIDs.
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-age))}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: p.Spec.Containers[0].Name, Ready: true, RestartCount: restarts}}
		p.Annotations = map[string]string{pidstats.AnnotationPodPIDs: "400"}
		for k, v := range annotations {
			p.Annotations[k] = v
		}
		p.OwnerReferences = nil
		if owner != "" {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: owner, UID: types.UID(owner), Controller: ptr.To(true)}}
		}
		if edit != nil {
			edit(p)
		}
		return p
	}
	prio := func(v string) map[string]string {
		return map[string]string{"controller.alpha.kubernetes.io/delete-priority": v}
	}
	// The descheduler's record: hot was seen above its threshold in the
	// sample before this one, so the shipped debounce (two samples) is met.
	seen, _ := json.Marshal(map[string]any{"seen": []time.Time{now.Add(-2 * time.Minute)}})
	state := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "headroom-system", Name: "headroom-descheduler-state"},
		Data: map[string]string{"hot": string(seen)}}
	objs := []runtime.Object{hot, cool, state, test.BuildTestNamespace("default"),
		pod("bare", "", 3*time.Hour, 0, prio("10"), nil),
		pod("legacy", "legacy", 3*time.Hour, 0, prio("9"), func(p *corev1.Pod) { p.Spec.SchedulerName = "default-scheduler" }),
		pod("legacy-2", "legacy", 3*time.Hour, 0, nil, func(p *corev1.Pod) { p.Spec.NodeName = "cool" }),
		pod("solo", "solo", 3*time.Hour, 0, prio("8"), nil),
		pod("young", "web", 2*time.Minute, 0, prio("7"), nil),
	}
	for i, r := range []int32{4, 3, 2, 1} {
		objs = append(objs, pod("web-"+string(rune('1'+i)), "web", 3*time.Hour, r, nil, nil))
	}
	return fake.NewClientset(objs...)
}

func TestEvictionsListsThePlanInOrderWithReasons(t *testing.T) {
	client := evictionsCluster()
	out, err := run(t, client, "evictions", "hot")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{
		`profile "headroom" of the built-in default (manifests/descheduler/policy.yaml)`,
		"now: PIDsUsed 9900/10000 (99.0%)",
		"plan: 3 eviction(s), after which PIDsUsed 8700/10000 (87.0%)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// Across workloads the order is neutral: web, five pods here, is the
	// most doubled up and goes first, whatever the other workloads' delete
	// priorities say; within web, young's priority 7 puts it first.
	rows := []string{
		`1 +default/young +0 +400 +skip: the evictor's filter keeps it: pod age is not older than MinPodAge`,
		`2 +default/web-1 +0 +400 +EVICT 1: RelieveNodePressure: node hot PIDs 99.0% used > threshold 95%`,
		`3 +default/web-2 +0 +400 +EVICT 2: `,
		`4 +default/web-3 +0 +400 +EVICT 3: `,
		`5 +default/web-4 +0 +400 +skip: not needed`,
		`6 +default/legacy +0 +400 +skip: not needed`,
		`7 +default/solo +0 +400 +skip: not needed`,
		`8 +default/bare +0 +400 +skip: not needed`,
	}
	lines := strings.Split(out, "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "#") {
			start = i + 1
		}
	}
	if start < 0 || len(lines) < start+len(rows) {
		t.Fatalf("no table of %d pods:\n%s", len(rows), out)
	}
	for i, re := range rows {
		if !regexp.MustCompile("^" + re).MatchString(lines[start+i]) {
			t.Errorf("row %d: %q, want /%s/", i+1, lines[start+i], re)
		}
	}
	// Only reads reached the cluster.
	for _, a := range client.Actions() {
		if a.GetVerb() != "list" && a.GetVerb() != "get" {
			t.Errorf("evictions sent %s %s/%s to the cluster", a.GetVerb(), a.GetResource().Resource, a.GetSubresource())
		}
	}
}

// Without an earlier sample above the threshold in the descheduler's
// record, the next run only counts this one: the plan says so, and why.
func TestEvictionsWaitForThePressureToLast(t *testing.T) {
	client := evictionsCluster()
	if err := client.CoreV1().ConfigMaps("headroom-system").Delete(context.Background(), "headroom-descheduler-state", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, client, "evictions", "hot")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{
		`note: the descheduler's record of earlier runs, ConfigMap headroom-system/headroom-descheduler-state, could not be read`,
		"waiting: seen above threshold in 1 of 2 consecutive samples; nothing is evicted until the pressure lasts (pressureSamples)",
		// The plan that runs if it lasts is shown all the same.
		"plan if the pressure lasts, by the figures of now: 3 eviction(s), after which PIDsUsed 8700/10000 (87.0%)",
		"default/web-1   0         400         EVICT 1: ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	out, err = run(t, client, "evictions", "hot", "-o", "json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	p := kubectlout.DecodeStrict[v1alpha1.NodeEvictionPlan](t, out)
	if p.Decision != v1alpha1.DecisionWaiting || p.PressureSeen != "1 of 2 consecutive samples" || !p.Relieves || p.Evictions != 3 {
		t.Errorf("decision %s, pressure seen %q, relieves %v, %d evictions; want Waiting, 1 of 2 consecutive samples, true, 3", p.Decision, p.PressureSeen, p.Relieves, p.Evictions)
	}
}

// -o json prints a NodeEvictionPlan, the table's content: each row of
// the table is a pod of it, with the same decision.
func TestEvictionsJSONIsTheTable(t *testing.T) {
	client := evictionsCluster()
	table, err := run(t, client, "evictions", "hot")
	if err != nil {
		t.Fatalf("%v\n%s", err, table)
	}
	out, err := run(t, client, "evictions", "hot", "-o", "json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	p := kubectlout.DecodeStrict[v1alpha1.NodeEvictionPlan](t, out)
	if p.APIVersion != "kubectl.headroom.dev/v1alpha1" || p.Kind != "NodeEvictionPlan" || p.Name != "hot" {
		t.Errorf("apiVersion %q, kind %q, name %q", p.APIVersion, p.Kind, p.Name)
	}
	if p.Decision != v1alpha1.DecisionEvict || !p.Relieves || p.Evictions != 3 || p.Profile != "headroom" {
		t.Errorf("decision %s, relieves %v, %d evictions, profile %q; want Evict, true, 3, headroom", p.Decision, p.Relieves, p.Evictions, p.Profile)
	}
	for _, want := range []string{"now: " + figureList(p.Now), "above threshold (" + figureList(p.Thresholds) + ")", "after which " + figureList(p.After)} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q of the JSON:\n%s", want, table)
		}
	}
	if rows := kubectlout.EvictionRows(t, table); !slices.Equal(rows, kubectlout.PlanRows(p)) {
		t.Errorf("table rows\n%s\nJSON pods\n%s", strings.Join(rows, "\n"), strings.Join(kubectlout.PlanRows(p), "\n"))
	}
	// -o yaml is the same object.
	yamlOut, err := run(t, client, "evictions", "hot", "-o", "yaml")
	if err != nil {
		t.Fatal(err)
	}
	var fromYAML v1alpha1.NodeEvictionPlan
	if err := yaml.UnmarshalStrict([]byte(yamlOut), &fromYAML); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(&fromYAML, p) {
		t.Errorf("-o yaml and -o json differ:\n%s\n%s", yamlOut, out)
	}
	if _, err := run(t, client, "evictions", "hot", "-o", "wide"); err == nil || !strings.Contains(err.Error(), "want one of") {
		t.Errorf("-o wide: err %v, want the formats listed", err)
	}
}

func TestEvictionsWithAPolicyFile(t *testing.T) {
	// No minReplicas, no minPodAge, no nodeFit, a per-node plan of 1: web
	// gives up one pod, enough to reach the threshold (not the target), and
	// its own delete priorities make it young.
	policy := writeFile(t, "policy.yaml", `apiVersion: descheduler/v1alpha2
kind: DeschedulerPolicy
profiles:
- name: mine
  pluginConfig:
  - name: DefaultEvictor
    args: {}
  - name: RelieveNodePressure
    args:
      maxPodsToEvictPerNode: 1
  plugins:
    deschedule:
      enabled: [RelieveNodePressure]
`)
	out, err := run(t, evictionsCluster(), "evictions", "hot", "--policy", policy)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{
		`profile "mine" of ` + policy,
		"plan: 1 eviction(s), after which PIDsUsed 9500/10000 (95.0%)",
		"default/young   0         400         EVICT 1: ",
		"default/web-1   0         400         skip: its workload's delete-priority and pod-deletion-cost put other pods of it first",
		"default/web-2   0         400         skip: beyond maxPodsToEvictPerNode 1",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestEvictionsErrors(t *testing.T) {
	bad := writeFile(t, "bad.yaml", `apiVersion: descheduler/v1alpha2
kind: DeschedulerPolicy
profiles:
- name: p
  pluginConfig:
  - name: RelieveNodePressure
    args:
      pids: {thresholdPercent: 0}
  plugins:
    deschedule:
      enabled: [RelieveNodePressure]
`)
	none := writeFile(t, "none.yaml", `apiVersion: descheduler/v1alpha2
kind: DeschedulerPolicy
profiles:
- name: p
  pluginConfig:
  - name: RemoveFailedPods
    args: {}
  plugins:
    deschedule:
      enabled: [RemoveFailedPods]
`)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"evictions", "nowhere"}, `node "nowhere"`},
		{[]string{"evictions", "hot", "--policy", bad}, "thresholdPercent"},
		{[]string{"evictions", "hot", "--policy", none}, "no profile enables RelieveNodePressure"},
		{[]string{"evictions", "hot", "--policy", "/does/not/exist"}, "/does/not/exist"},
		{[]string{"evictions"}, "accepts 1 arg"},
	} {
		out, err := run(t, evictionsCluster(), tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want one naming %q\n%s", tc.args, err, tc.want, out)
		}
	}
}

// A node that is not Ready is left alone by the descheduler; a cluster of
// one ready node gets no cycle at all: both are said.
func TestEvictionsOfANodeTheDeschedulerSkips(t *testing.T) {
	client := evictionsCluster()
	cool, err := client.CoreV1().Nodes().Get(context.Background(), "cool", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cool.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
	if _, err := client.CoreV1().Nodes().Update(context.Background(), cool, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, client, "evictions", "cool")
	if err != nil || !strings.Contains(out, "node cool is not Ready or not selected by the policy's nodeSelector: the descheduler leaves it alone") {
		t.Errorf("cool: err %v\n%s", err, out)
	}
	out, err = run(t, client, "evictions", "hot")
	if err != nil || !strings.Contains(out, "note: 1 ready node; the descheduler skips its cycles with fewer than 2") {
		t.Errorf("hot: err %v\n%s", err, out)
	}
}

// TestEvictionsShowPodsStarvedOfAPodIP: on a node with no free pod IP, the
// plan lists the ipStarved trigger's eviction of a pod the kubelet has
// failed for want of one for 5 minutes, with its reason, and the pod
// starved for less than the grace with why it stays; the kubelet's
// FailedCreatePodSandBox Events are copied into the plan's sandbox.
func TestEvictionsShowPodsStarvedOfAPodIP(t *testing.T) {
	now := time.Now()
	full := test.BuildTestNode("full", 8000, 32<<30, 110, func(n *corev1.Node) {
		n.Annotations = ipstats.NewNodeStats(13, 13, now.Add(-time.Minute)).Annotations()
	})
	free := test.BuildTestNode("free", 8000, 32<<30, 110, func(n *corev1.Node) {
		n.Annotations = ipstats.NewNodeStats(13, 0, now.Add(-time.Minute)).Annotations()
	})
	objs := []runtime.Object{full, free, test.BuildTestNamespace("default")}
	for _, s := range []struct {
		name    string
		starved time.Duration
	}{{"starved", 5 * time.Minute}, {"young", 30 * time.Second}} {
		p := test.BuildTestPod(s.name, 100, 0, "full", nil)
		p.UID = types.UID("uid-" + s.name)
		p.Spec.SchedulerName = "headroom-scheduler"
		started := metav1.NewTime(now.Add(-3 * time.Hour))
		p.CreationTimestamp, p.Status.StartTime = started, &started
		p.Status.Phase = corev1.PodPending
		p.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: started},
			{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionFalse, LastTransitionTime: started},
		}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: p.Spec.Containers[0].Name,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "web", Controller: ptr.To(true)}}
		objs = append(objs, p, &corev1.Event{
			ObjectMeta: metav1.ObjectMeta{Name: s.name + ".1", Namespace: "default",
				CreationTimestamp: metav1.NewTime(now.Add(-s.starved))},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: s.name, UID: p.UID},
			Reason:         ipstarved.ReasonFailedCreatePodSandBox, Type: corev1.EventTypeWarning,
			Message:             `Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "1": plugin type="bridge" failed (add): failed to allocate for range 0: no IP addresses available in range set: 10.88.0.1-10.88.0.14`,
			Source:              corev1.EventSource{Component: "kubelet", Host: "full"},
			ReportingController: "kubelet", ReportingInstance: "full",
			FirstTimestamp: metav1.NewTime(now.Add(-s.starved)), LastTimestamp: metav1.NewTime(now.Add(-10 * time.Second)),
		})
	}
	out, err := run(t, fake.NewClientset(objs...), "evictions", "full")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^no free pod IP, and pods starved of one \(ipStarved\)$`),
		regexp.MustCompile(`(?m)^plan: 1 eviction\(s\)$`),
		regexp.MustCompile(`(?m)^1 +default/starved .*EVICT 1: RelieveNodePressure: node full has no free pod IP \(15/13 used\), pod starved of one for 5m0s \(host-local\)$`),
		regexp.MustCompile(`(?m)^2 +default/young .*skip: ipStarved: starved of a pod IP for 30s, within ipStarved.grace 2m0s$`),
	} {
		if !want.MatchString(out) {
			t.Errorf("output lacks /%s/:\n%s", want, out)
		}
	}
}

// The eviction budget, as the descheduler's state ConfigMap holds it, is
// part of the plan: with the shipped policy's 20 evictions per 4 minutes
// made a minute ago, the plan gets none, and the decision is BudgetSpent,
// saying which budget and how much it leaves.
func TestEvictionsSayWhenTheBudgetIsSpent(t *testing.T) {
	client := evictionsCluster()
	ctx := context.Background()
	cm, err := client.CoreV1().ConfigMaps("headroom-system").Get(ctx, "headroom-descheduler-state", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var entries []map[string]any
	for i := range 4 {
		// 5 evictions from each of four other nodes and namespaces.
		entries = append(entries, map[string]any{"t": time.Now().Add(-time.Minute).Unix(), "node": "other-" + string(rune('a'+i)), "ns": "ns-" + string(rune('a'+i)), "n": 5})
	}
	ledger, _ := json.Marshal(map[string]any{"evictions": entries})
	cm.Data["_evictionBudget"] = string(ledger)
	if _, err := client.CoreV1().ConfigMaps("headroom-system").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, client, "evictions", "hot")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{
		"plan: none now: the eviction budget allows 0 more within the last 4m0s: 20 evictions in the cluster (evictionBudget.total 20); nothing is evicted until the window slides",
		"default/web-1   0         400         skip: beyond the eviction budget: the eviction budget allows 0 more",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	out, err = run(t, client, "evictions", "hot", "-o", "json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	p := kubectlout.DecodeStrict[v1alpha1.NodeEvictionPlan](t, out)
	if p.Decision != v1alpha1.DecisionBudgetSpent || p.Relieves || !strings.Contains(p.Budget, "evictionBudget.total 20") {
		t.Errorf("decision %s, relieves %v, budget %q; want BudgetSpent, false, the total budget", p.Decision, p.Relieves, p.Budget)
	}
}
