// Package cyclestate is how Headroom's scheduler plugins read what their
// PreFilter or PreScore wrote to the scheduling cycle's CycleState from
// Filter and Score, which run once per node: CycleState.Read is a
// synchronized map read that hashes the key, on every call; Last remembers
// the cycle it was written for, so a call in that cycle costs a pointer
// comparison.
package cyclestate

import (
	"sync/atomic"

	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// Last is a plugin's last write of one kind of state data T. The zero value
// is ready to use; it is safe for concurrent use.
type Last[T fwk.StateData] struct {
	p atomic.Pointer[write[T]]
}

type write[T fwk.StateData] struct {
	state *framework.CycleState
	key   fwk.StateKey
	data  T
}

// Write writes data to state under key, and remembers it.
func (l *Last[T]) Write(state fwk.CycleState, key fwk.StateKey, data T) {
	state.Write(key, data)
	if cs, ok := state.(*framework.CycleState); ok {
		l.p.Store(&write[T]{state: cs, key: key, data: data})
	}
}

// Read returns what was written to state under key: the remembered data
// when it was written to this very state (not a clone, not another
// cycle's), what state holds otherwise.
func (l *Last[T]) Read(state fwk.CycleState, key fwk.StateKey) (T, bool) {
	if w := l.p.Load(); w != nil && w.key == key {
		if cs, ok := state.(*framework.CycleState); ok && cs == w.state {
			return w.data, true
		}
	}
	var zero T
	if state == nil {
		return zero, false
	}
	d, err := state.Read(key)
	if err != nil {
		return zero, false
	}
	data, ok := d.(T)
	return data, ok
}
