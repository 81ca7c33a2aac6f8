// Package pluginlog gives the scheduler plugins the logger of an extension
// point at an absolute verbosity. The framework passes each extension point
// its logger in the context, and from 1.37 Score's is already raised to V(4)
// (klog.NewContext(ctx, logger.V(4)) in RunScorePlugins): a plugin's own
// V(4) there would log only at -v=8, at -v=4 on 1.35 and 1.36.
package pluginlog

import (
	"context"

	"k8s.io/klog/v2"
)

// V is the context's logger at verbosity level, counted from the process's
// -v whatever the framework has raised it by already.
func V(ctx context.Context, level int) klog.Logger {
	logger := klog.FromContext(ctx)
	if v := logger.GetV(); v < level {
		return logger.V(level - v)
	}
	return logger
}
