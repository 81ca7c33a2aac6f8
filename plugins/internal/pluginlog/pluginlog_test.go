package pluginlog

import (
	"context"
	"testing"

	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"
)

// TestVIsAbsolute: at -v=4, V(ctx, 4) logs whether the context's logger is
// the process's own or already raised to V(4), as 1.37's Score context is,
// and V(ctx, 5) logs in neither.
func TestVIsAbsolute(t *testing.T) {
	var lines int
	base := funcr.New(func(prefix, args string) { lines++ }, funcr.Options{Verbosity: 4})
	for _, tc := range []struct {
		name   string
		logger klog.Logger
	}{{"the process's logger", base}, {"a logger raised to V(4)", base.V(4)}} {
		ctx := klog.NewContext(context.Background(), tc.logger)
		lines = 0
		V(ctx, 4).Info("at 4")
		if lines != 1 {
			t.Errorf("%s: V(ctx, 4) logged %d lines at -v=4, want 1", tc.name, lines)
		}
		lines = 0
		V(ctx, 5).Info("at 5")
		if lines != 0 {
			t.Errorf("%s: V(ctx, 5) logged %d lines at -v=4, want 0", tc.name, lines)
		}
	}
}
