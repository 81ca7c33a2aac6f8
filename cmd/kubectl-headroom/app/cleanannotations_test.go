package app

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func annotatedNodes() *fake.Clientset {
	return fake.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"pool": "x"}, Annotations: map[string]string{
			"headroom.dev/pid-used": "10", "headroom.dev/pid-capacity": "100", "example.com/keep": "yes"}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "b", Annotations: map[string]string{"headroom.dev/ip-used": "3"}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "c", Annotations: map[string]string{"other": "1"}}},
	)
}

func annotationsOf(t *testing.T, client *fake.Clientset, node string) map[string]string {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Annotations
}

func TestCleanAnnotations(t *testing.T) {
	// A dry run by default: it says what it would remove and patches nothing.
	client := annotatedNodes()
	out, errOut, err := runStreams(t, client, "clean-annotations")
	if err != nil {
		t.Fatal(err)
	}
	want := "node/a: would remove headroom.dev/pid-capacity, headroom.dev/pid-used\nnode/b: would remove headroom.dev/ip-used\n"
	if out != want || !strings.Contains(errOut, "Dry run: 3 annotation(s) on 2 node(s) would be removed; run again with --yes") {
		t.Errorf("dry run:\n%s%s\nwant\n%s", out, errOut, want)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "patch" || a.GetVerb() == "update" {
			t.Errorf("dry run sent %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
	// --yes removes the headroom.dev/ keys only.
	out, err = run(t, client, "clean-annotations", "--yes")
	if err != nil {
		t.Fatal(err)
	}
	if want := "node/a: removed headroom.dev/pid-capacity, headroom.dev/pid-used\nnode/b: removed headroom.dev/ip-used\n"; out != want {
		t.Errorf("--yes:\n%s\nwant\n%s", out, want)
	}
	if got := annotationsOf(t, client, "a"); len(got) != 1 || got["example.com/keep"] != "yes" {
		t.Errorf("a's annotations after: %v", got)
	}
	if got := annotationsOf(t, client, "b"); len(got) != 0 {
		t.Errorf("b's annotations after: %v", got)
	}
	if got := annotationsOf(t, client, "c"); got["other"] != "1" {
		t.Errorf("c's annotations after: %v", got)
	}
	// Again: nothing left.
	_, errOut, err = runStreams(t, client, "clean-annotations", "--yes")
	if err != nil || !strings.Contains(errOut, "No node carries headroom.dev/ annotations") {
		t.Errorf("second run: err %v, stderr %q", err, errOut)
	}
}

func TestCleanAnnotationsNamedAndSelected(t *testing.T) {
	client := annotatedNodes()
	if out, err := run(t, client, "clean-annotations", "b", "--yes"); err != nil || out != "node/b: removed headroom.dev/ip-used\n" {
		t.Errorf("clean-annotations b: %v %q", err, out)
	}
	if got := annotationsOf(t, client, "a"); len(got) != 3 {
		t.Errorf("a was touched: %v", got)
	}
	if out, err := run(t, client, "clean-annotations", "-l", "pool=x"); err != nil || !strings.HasPrefix(out, "node/a: would remove") || strings.Contains(out, "node/b") {
		t.Errorf("-l pool=x: %v %q", err, out)
	}
	if _, err := run(t, client, "clean-annotations", "nope"); err == nil || !strings.Contains(err.Error(), `node "nope" not found`) {
		t.Errorf("unknown node: %v", err)
	}
	if _, err := run(t, client, "clean-annotations", "a", "-l", "pool=x"); err == nil {
		t.Error("NODE and -l: no error")
	}
	// The node agent still installed: a warning.
	client = annotatedNodes()
	if err := client.Tracker().Add(&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "headroom-system", Name: "headroom-node-agent"}}); err != nil {
		t.Fatal(err)
	}
	if _, errOut, err := runStreams(t, client, "clean-annotations"); err != nil || !strings.Contains(errOut, "Warning: DaemonSet headroom-system/headroom-node-agent is still there") {
		t.Errorf("with the agent: %v %q", err, errOut)
	}
}
