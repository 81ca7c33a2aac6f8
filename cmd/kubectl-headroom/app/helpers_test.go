package app

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
)

// run runs kubectl-headroom with args against client and returns what it
// printed on stdout.
func run(t *testing.T, client kubernetes.Interface, args ...string) (string, error) {
	t.Helper()
	out, _, err := runStreams(t, client, args...)
	return out, err
}

// runStreams runs kubectl-headroom with args against client and returns
// what it printed on stdout and on stderr.
func runStreams(t *testing.T, client kubernetes.Interface, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	o := &options{
		streams:   genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut},
		config:    genericclioptions.NewConfigFlags(false),
		newClient: func() (kubernetes.Interface, error) { return client, nil },
	}
	cmd := newCommand(o)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
