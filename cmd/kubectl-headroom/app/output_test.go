package app

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"github.com/headroom-k8s/headroom/apis/kubectl/v1alpha1"
)

// nodesList runs nodes with args and decodes its -o json.
func nodesList(t *testing.T, client *fake.Clientset, args ...string) *v1alpha1.NodeHeadroomList {
	t.Helper()
	out, err := run(t, client, append([]string{"nodes", "-o", "json"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	list := &v1alpha1.NodeHeadroomList{}
	if err := json.Unmarshal([]byte(out), list); err != nil {
		t.Fatalf("-o json does not parse: %v\n%s", err, out)
	}
	return list
}

func i64(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// -o json is a NodeHeadroomList with the table's figures and each
// sample's state.
func TestNodesJSON(t *testing.T) {
	list := nodesList(t, headroomCluster(), "--sort-by", "pid-free")
	if list.APIVersion != "kubectl.headroom.dev/v1alpha1" || list.Kind != "NodeHeadroomList" {
		t.Errorf("apiVersion %q kind %q", list.APIVersion, list.Kind)
	}
	if list.Profile != "headroom-scheduler" || !strings.Contains(list.SchedulerConfiguration, "built-in default") {
		t.Errorf("profile %q of %q", list.Profile, list.SchedulerConfiguration)
	}
	var names []string
	for _, it := range list.Items {
		names = append(names, it.Name)
	}
	if got := strings.Join(names, " "); got != "short roomy blank broken" {
		t.Fatalf("items %s, want the order of --sort-by pid-free", got)
	}
	short, roomy, blank, broken := list.Items[0], list.Items[1], list.Items[2], list.Items[3]
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"short pids.state", short.PIDs.State, v1alpha1.StateKnown},
		{"short pids.allocatable", i64(short.PIDs.Allocatable), int64(4000)},
		{"short pids.used", i64(short.PIDs.Used), int64(3000)},
		{"short pids.estimatedUsed", i64(short.PIDs.EstimatedUsed), int64(3500)},
		{"short pids.estimatedFree", i64(short.PIDs.EstimatedFree), int64(500)},
		{"short podIPs.estimatedFree", i64(short.PodIPs.EstimatedFree), int64(0)},
		{"short memory.shortfallBytes", i64(short.Memory.ShortfallBytes), int64(5 << 30)},
		// Measured: the kernel's order by what each pod holds now (their
		// requests, 1Gi each, placed after the sample), ties by name:
		// forker (1Gi) and hog (12Gi) cover the 5Gi shortfall.
		{"short memory.atRiskBytes", i64(short.Memory.AtRiskBytes), int64(13 << 30)},
		{"short memory.measured", short.Memory.Measured, v1alpha1.StateKnown},
		{"short memory.usedBytes", i64(short.Memory.UsedBytes), int64(13 << 30)},
		{"short memory.shortfallNowBytes", i64(short.Memory.ShortfallNowBytes), int64(0)},
		{"roomy memory.measured", roomy.Memory.Measured, v1alpha1.StateUnknown},
		{"roomy memory.usedBytes", i64(roomy.Memory.UsedBytes), nil},
		{"roomy podIPs.state", roomy.PodIPs.State, v1alpha1.StateStale},
		{"roomy podIPs.capacity", i64(roomy.PodIPs.Capacity), int64(253)},
		{"blank pids.state", blank.PIDs.State, v1alpha1.StateUnknown},
		{"blank pids.capacity", i64(blank.PIDs.Capacity), nil},
		{"blank memory.state", blank.Memory.State, v1alpha1.StateUnknown},
		{"broken pids.state", broken.PIDs.State, v1alpha1.StateInvalid},
		{"broken podIPs.state", broken.PodIPs.State, v1alpha1.StateInvalid},
		{"short verdict", short.Verdict == nil, true},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
		}
	}
	if roomy.PodIPs.Message == "" || broken.PIDs.Message == "" {
		t.Errorf("stale and invalid samples carry no message: %q, %q", roomy.PodIPs.Message, broken.PIDs.Message)
	}
	// With a pod: the verdicts, as in the table.
	list = nodesList(t, headroomCluster(), "--pod-file", writeFile(t, "pod.yaml", podYAML), "--sort-by", "score")
	if list.Pod != "default/new" {
		t.Errorf("pod %q", list.Pod)
	}
	var verdicts []string
	for _, it := range list.Items {
		v := it.Verdict
		s := it.Name + " " + v.Filter + " " + v.FilterPlugin
		if v.Score != nil {
			s += fmt.Sprint(" ", *v.Score)
		}
		verdicts = append(verdicts, s)
	}
	if got, want := strings.Join(verdicts, ", "), "roomy passes  300, blank passes  200, broken passes  200, short fails NodePIDs"; got != want {
		t.Errorf("verdicts %q, want %q", got, want)
	}
}

// -o yaml decodes, strictly, through the output kinds' scheme to the same
// list as -o json, and encodes back to the same YAML.
func TestNodesYAMLRoundTrips(t *testing.T) {
	client := headroomCluster()
	out, err := run(t, client, "nodes", "-o", "yaml")
	if err != nil {
		t.Fatal(err)
	}
	obj, gvk, err := v1alpha1.Codecs.UniversalDeserializer().Decode([]byte(out), nil, nil)
	if err != nil {
		t.Fatalf("-o yaml does not decode: %v\n%s", err, out)
	}
	list, ok := obj.(*v1alpha1.NodeHeadroomList)
	if !ok || gvk.Kind != "NodeHeadroomList" || gvk.GroupVersion() != v1alpha1.SchemeGroupVersion {
		t.Fatalf("decoded %T %v", obj, gvk)
	}
	if len(list.Items) != 4 || list.Items[0].Name != "blank" {
		t.Errorf("items %+v", list.Items)
	}
	fromJSON := nodesList(t, client)
	// Both ran at nearly the same instant; the figures do not depend on
	// it, a stale sample's message (its age) does.
	for _, l := range []*v1alpha1.NodeHeadroomList{list, fromJSON} {
		for i := range l.Items {
			if l.Items[i].PodIPs.State == v1alpha1.StateStale {
				l.Items[i].PodIPs.Message = ""
			}
		}
	}
	if !equality.Semantic.DeepEqual(list, fromJSON) {
		t.Errorf("-o yaml and -o json differ:\n%+v\n%+v", list, fromJSON)
	}
	obj, _, err = v1alpha1.Codecs.UniversalDeserializer().Decode([]byte(out), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	again, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != out {
		t.Errorf("re-encoded:\n%s\nprinted:\n%s", again, out)
	}
}

func TestNodesName(t *testing.T) {
	out, err := run(t, headroomCluster(), "nodes", "--sort-by", "pid-free", "-o", "name")
	if err != nil {
		t.Fatal(err)
	}
	if want := "node/short\nnode/roomy\nnode/blank\nnode/broken\n"; out != want {
		t.Errorf("-o name:\n%s\nwant\n%s", out, want)
	}
}

func TestNodesJSONPath(t *testing.T) {
	out, err := run(t, headroomCluster(), "nodes", "--sort-by", "pid-free",
		"-o", `jsonpath={range .items[*]}{.metadata.name}={.pids.state}/{.pids.estimatedFree}{"\n"}{end}`)
	if err != nil {
		t.Fatal(err)
	}
	if want := "short=known/500\nroomy=known/31768\nblank=unknown/\nbroken=invalid/\n"; out != want {
		t.Errorf("-o jsonpath:\n%s\nwant\n%s", out, want)
	}
	if _, err := run(t, headroomCluster(), "nodes", "-o", "table"); err == nil || !strings.Contains(err.Error(), "wide") {
		t.Errorf("-o table: error %v, want one listing the formats", err)
	}
}

// -o wide adds its columns where they belong; the default table has none
// of them.
func TestNodesWide(t *testing.T) {
	rows := table(t, headroomCluster(), "-o", "wide", "--sort-by", "pid-free")
	want := []string{"NAME", "PIDS-CAPACITY", "PIDS-RESERVED", "PIDS-ALLOCATABLE", "PIDS-USED", "PIDS-USED(EST)", "PIDS-FREE(EST)", "SAMPLE-AGE",
		"POD-IPS", "POD-IPS-USED", "POD-IPS-FREE(EST)", "POD-IPS-LEAKED", "IP-SAMPLE-AGE", "MEM-ALLOCATABLE", "MEM-USED", "MEM-WORST-CASE", "OOM-SHORTFALL", "OOM-AT-RISK"}
	if got := strings.Join(rows[0], " "); got != strings.Join(want, " ") {
		t.Fatalf("wide header\n%s\nwant\n%s", got, strings.Join(want, " "))
	}
	if got := strings.Join(rows[1][:7], " "); got != "short 4096 96 4000 3000 3500 500" {
		t.Errorf("short: %s", got)
	}
	// With a pod, Filter's reason.
	out, err := run(t, headroomCluster(), "nodes", "-o", "wide", "--pod-file", writeFile(t, "pod.yaml", podYAML), "--sort-by", "score")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if h := strings.Fields(lines[0]); strings.Join(h[len(h)-3:], " ") != "FILTER SCORE FILTER-REASON" {
		t.Errorf("header %q", lines[0])
	}
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "short") || !strings.Contains(last, "too few free PIDs") {
		t.Errorf("short's row %q lacks NodePIDs' reason", last)
	}
}

// labelled is headroomCluster with zone labels: short and blank in a,
// roomy in b, broken in none.
func labelled() *fake.Clientset {
	client := headroomCluster()
	for node, zone := range map[string]string{"short": "a", "blank": "a", "roomy": "b"} {
		n, err := client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("nodes"), "", node)
		if err != nil {
			panic(err)
		}
		nn := n.(*corev1.Node)
		nn.Labels = map[string]string{"zone": zone}
		if err := client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), nn, ""); err != nil {
			panic(err)
		}
	}
	return client
}

func TestNodesSelector(t *testing.T) {
	for _, tc := range []struct {
		selector, want string
	}{
		{"zone=a", "node/blank\nnode/short\n"},
		{"zone in (a,b)", "node/blank\nnode/roomy\nnode/short\n"},
		{"!zone", "node/broken\n"},
		{"zone=c", ""},
	} {
		out, err := run(t, labelled(), "nodes", "-l", tc.selector, "-o", "name")
		if err != nil {
			t.Fatal(err)
		}
		if out != tc.want {
			t.Errorf("-l %s:\n%s\nwant\n%s", tc.selector, out, tc.want)
		}
	}
	// The pod's cycle runs over the selected nodes only.
	list := nodesList(t, labelled(), "-l", "zone=a", "--pod-file", writeFile(t, "pod.yaml", podYAML))
	if len(list.Items) != 2 || list.Items[0].Verdict.Filter != "passes" || list.Items[1].Verdict.FilterPlugin != "NodePIDs" {
		t.Errorf("-l zone=a with a pod: %+v", list.Items)
	}
	// The labels show as kubectl shows them.
	rows := table(t, labelled(), "-l", "zone", "-L", "zone")
	if got := rows[0][len(rows[0])-1] + " " + rows[1][0] + " " + rows[1][len(rows[1])-1]; got != "ZONE blank a" {
		t.Errorf("-L zone: %v", rows)
	}
	if _, err := run(t, labelled(), "nodes", "-l", "zone=(a"); err == nil || !strings.Contains(err.Error(), "-l") {
		t.Errorf("a bad selector: error %v", err)
	}
	_, errOut, err := runStreams(t, labelled(), "nodes", "-l", "zone=c")
	if err != nil || !strings.Contains(errOut, "No nodes found") {
		t.Errorf("no node selected: err %v, stderr %q", err, errOut)
	}
}
