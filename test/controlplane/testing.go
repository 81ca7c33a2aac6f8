package controlplane

import (
	"context"
	"testing"
	"time"
)

// StartForTest starts a control plane for t and stops it when t ends, also
// when t fails or panics; a failing test gets the end of every log.
func StartForTest(t testing.TB, opts Options) *ControlPlane {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("starting control plane: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(cp.LogTails())
		}
		cp.Stop()
	})
	return cp
}
