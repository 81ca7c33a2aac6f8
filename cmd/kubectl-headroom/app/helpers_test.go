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
// printed.
func run(t *testing.T, client kubernetes.Interface, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	o := &options{
		streams:   genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &out},
		config:    genericclioptions.NewConfigFlags(false),
		newClient: func() (kubernetes.Interface, error) { return client, nil },
	}
	cmd := newCommand(o)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
