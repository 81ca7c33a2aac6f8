//go:build e2ebench

package e2ebench

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/headroom-k8s/headroom/test/controlplane"
)

// podLog follows the stress pods of a run from before the first one is
// made to the end, looking every podLogPeriod: every placement, every
// container termination (a kernel OOM kill shows as OOMKilled), every
// eviction (the kubelet's: phase Failed, reason Evicted; the Eviction
// API's, the descheduler's: the DisruptionTarget condition) and every pod
// gone without either. It runs from the start so that no pod can leave
// the node unseen (an eviction during set-up once went unexplained).
type podLog struct {
	start time.Time
	mu    sync.Mutex
	pods  map[types.UID]*podSeen
	// looked: the pods were listed once (placements after it are events).
	looked bool
	// killed are containers' terminations by app and reason; evicted are
	// evictions by app and by whom.
	killed, evicted map[string]map[string]int
	timeline        []string
	// victims are the evicted pods in the order seen: "<app> (<by>)".
	victims []string
	// firstEviction is when the first eviction was asked for (the API
	// server's DisruptionTarget time, to the second, or when it was seen),
	// from start; -1: none.
	firstEviction time.Duration
	stop          func()
	done          chan struct{}
}

// podLogPeriod is how often the pod log lists the pods.
const podLogPeriod = 500 * time.Millisecond

// podSeen is what the pod log knows of one pod.
type podSeen struct {
	name, app string
	// terminated are the container IDs of the terminations counted.
	terminated map[string]bool
	evicted    bool
	node       string
}

// followPods starts a pod log of the default namespace's stress pods
// ("web" and "hog"); times in its timeline count from start, which a
// caller may move with restart.
func followPods(ctx context.Context, cp *controlplane.ControlPlane) *podLog {
	ctx, cancel := context.WithCancel(ctx)
	l := &podLog{
		start: time.Now(), pods: map[types.UID]*podSeen{},
		killed: map[string]map[string]int{}, evicted: map[string]map[string]int{},
		stop: cancel, done: make(chan struct{}), firstEviction: -1,
	}
	go func() {
		defer close(l.done)
		for ctx.Err() == nil {
			if pods, err := cp.Client.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{}); err == nil {
				l.observe(pods.Items)
			}
			select {
			case <-ctx.Done():
			case <-time.After(podLogPeriod):
			}
		}
	}()
	return l
}

// restart counts the timeline's times from start and drops the set-up's
// lines from it (its evictions stay counted, and named in victims).
func (l *podLog) restart(start time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.start = start
	l.timeline = nil
	l.firstEviction = -1
	for _, v := range l.victims {
		l.timeline = append(l.timeline, "before the start: "+v+" evicted")
	}
}

// finish takes a last look with pods and stops following.
func (l *podLog) finish(pods []corev1.Pod) {
	l.stop()
	<-l.done
	l.observe(pods)
}

// note adds a line to the timeline.
func (l *podLog) note(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.event(format, args...)
}

func (l *podLog) event(format string, args ...any) {
	at := fmt.Sprintf("%ds", int(time.Since(l.start).Round(time.Second)/time.Second))
	l.timeline = append(l.timeline, at+" "+fmt.Sprintf(format, args...))
}

// observe notes what changed in the pods since the last look.
func (l *podLog) observe(pods []corev1.Pod) {
	l.mu.Lock()
	defer l.mu.Unlock()
	current := map[types.UID]bool{}
	for i := range pods {
		p := &pods[i]
		app := p.Labels["app"]
		if app != "web" && app != "hog" {
			continue
		}
		current[p.UID] = true
		s := l.pods[p.UID]
		if s == nil {
			s = &podSeen{name: p.Name, app: app, terminated: map[string]bool{}}
			l.pods[p.UID] = s
		}
		if p.Spec.NodeName != "" && s.node != p.Spec.NodeName {
			if l.looked {
				l.event("%s placed on %s", p.Name, p.Spec.NodeName)
			}
			s.node = p.Spec.NodeName
		}
		if !s.evicted {
			if by, at := evictedBy(p); by != "" {
				s.evicted = true
				l.countEviction(s, by)
				if l.firstEviction < 0 {
					l.firstEviction = at.Sub(l.start)
				}
			}
		}
		for _, c := range p.Status.ContainerStatuses {
			for _, term := range []*corev1.ContainerStateTerminated{c.LastTerminationState.Terminated, c.State.Terminated} {
				if term == nil || term.ContainerID == "" || s.terminated[term.ContainerID] {
					continue
				}
				s.terminated[term.ContainerID] = true
				if (s.evicted || p.DeletionTimestamp != nil) && term.Reason != "OOMKilled" {
					continue // stopped for its eviction or deletion
				}
				if l.killed[app] == nil {
					l.killed[app] = map[string]int{}
				}
				l.killed[app][term.Reason]++
				l.event("%s %s (exit %d)", p.Name, term.Reason, term.ExitCode)
			}
		}
	}
	for uid, s := range l.pods {
		if !current[uid] && !s.evicted {
			s.evicted = true
			l.countEviction(s, "deleted, reason not seen")
		}
	}
	l.looked = true
}

// evictedBy says who evicted p: the kubelet (phase Failed, reason Evicted,
// or its DisruptionTarget condition), the Eviction API (the descheduler's
// way), or "" for a pod not evicted; and when: the DisruptionTarget
// condition's time (the API server's, whole seconds), else now.
func evictedBy(p *corev1.Pod) (string, time.Time) {
	at := time.Now()
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			if !c.LastTransitionTime.IsZero() {
				at = c.LastTransitionTime.Time
			}
			switch c.Reason {
			case "EvictionByEvictionAPI":
				return "Eviction API (descheduler)", at
			case "TerminationByKubelet":
				return "kubelet", at
			default:
				return c.Reason, at
			}
		}
	}
	if p.Status.Phase == corev1.PodFailed && p.Status.Reason == "Evicted" {
		return "kubelet", at
	}
	return "", at
}

func (l *podLog) countEviction(s *podSeen, by string) {
	if l.evicted[s.app] == nil {
		l.evicted[s.app] = map[string]int{}
	}
	l.evicted[s.app][by]++
	l.victims = append(l.victims, s.app+" ("+by+")")
	l.event("%s evicted (%s)", s.name, by)
}

// evictions counts the evictions of app (every app when ""), by everyone
// or by by only.
func (l *podLog) evictions(app, by string) int {
	n := 0
	for a, m := range l.evicted {
		if app != "" && a != app {
			continue
		}
		for b, c := range m {
			if by == "" || b == by {
				n += c
			}
		}
	}
	return n
}

// kills counts app's containers terminated other than for an eviction or
// deletion (every app when "").
func (l *podLog) kills(app string) int {
	n := 0
	for a, m := range l.killed {
		if app != "" && a != app {
			continue
		}
		for _, c := range m {
			n += c
		}
	}
	return n
}
