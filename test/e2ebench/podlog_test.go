//go:build e2ebench

package e2ebench

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
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
	// victims are the evicted pods in the order seen: "<app> (<by>)";
	// evicted the same pods.
	victims     []string
	evictedSeen []*podSeen
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
	// created is its creationTimestamp, ready when its Ready condition
	// last became true (zero: never seen Ready).
	created, ready time.Time
	// by evicted it, at evictedAt; stop is its container's termination
	// after the eviction or its deletion (nil: not seen).
	by        string
	evictedAt time.Time
	// threshold is the kubelet's eviction's threshold quantity, as its
	// message names it ("" for other evictions): which of its thresholds,
	// soft or hard, it acted on.
	threshold string
	stop      *corev1.ContainerStateTerminated
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
	// A terminating pod's last status, with its containers' exit codes,
	// may live for less than podLogPeriod before the pod is deleted: a
	// watch sees every status.
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		l.watchStops(ctx, cp)
	}()
	go func() {
		defer close(l.done)
		defer func() { <-watched }()
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

// watchStops watches the stress pods until ctx ends and keeps each
// terminating or failed pod's container termination.
func (l *podLog) watchStops(ctx context.Context, cp *controlplane.ControlPlane) {
	for ctx.Err() == nil {
		w, err := cp.Client.CoreV1().Pods(metav1.NamespaceDefault).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(podLogPeriod):
			}
			continue
		}
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok {
				l.mu.Lock()
				if s := l.seen(p); s != nil {
					s.keepStop(p)
				}
				l.mu.Unlock()
			}
		}
		w.Stop()
	}
}

// seen is p's entry, made at its first sight; nil for a pod that is not a
// stress pod. l.mu is held.
func (l *podLog) seen(p *corev1.Pod) *podSeen {
	app := p.Labels["app"]
	if app != "web" && app != "hog" {
		return nil
	}
	s := l.pods[p.UID]
	if s == nil {
		s = &podSeen{name: p.Name, app: app, terminated: map[string]bool{}, created: p.CreationTimestamp.Time}
		l.pods[p.UID] = s
	}
	return s
}

// keepStop keeps p's container's termination once p is terminating or
// failed, and when p last became Ready.
func (s *podSeen) keepStop(p *corev1.Pod) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			s.ready = c.LastTransitionTime.Time
		}
	}
	if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed {
		return
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Terminated != nil {
			s.stop = c.State.Terminated.DeepCopy()
		}
	}
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
		s := l.seen(p)
		if s == nil {
			continue
		}
		app := s.app
		current[p.UID] = true
		s.keepStop(p)
		if p.Spec.NodeName != "" && s.node != p.Spec.NodeName {
			if l.looked {
				l.event("%s placed on %s", p.Name, p.Spec.NodeName)
			}
			s.node = p.Spec.NodeName
		}
		if !s.evicted {
			if by, at := evictedBy(p); by != "" {
				s.evicted = true
				s.threshold = kubeletThreshold(p)
				l.countEviction(s, by, at)
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
			l.countEviction(s, "deleted, reason not seen", time.Now())
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

// thresholdQuantity finds the threshold in the kubelet's eviction message
// ("The node was low on resource: memory. Threshold quantity: 100Mi,
// available: …"), the same for soft and hard thresholds but for the
// quantity.
var thresholdQuantity = regexp.MustCompile(`Threshold quantity: ([^,]+),`)

// kubeletThreshold is the threshold quantity the kubelet's eviction of p
// names, in its DisruptionTarget condition or the pod's status message;
// "" where there is none.
func kubeletThreshold(p *corev1.Pod) string {
	msgs := []string{p.Status.Message}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget {
			msgs = append(msgs, c.Message)
		}
	}
	for _, m := range msgs {
		if q := thresholdQuantity.FindStringSubmatch(m); q != nil {
			return q[1]
		}
	}
	return ""
}

func (l *podLog) countEviction(s *podSeen, by string, at time.Time) {
	s.by, s.evictedAt = by, at
	l.evictedSeen = append(l.evictedSeen, s)
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

// victim is an evicted pod: its app, who evicted it and when (and the
// kubelet's threshold), and its replacement: the node it was placed on
// ("" for none) and when it was Ready (zero: never).
type victim struct {
	app, by, threshold string
	evictedAt          time.Time
	replacedOn         string
	replacementReady   time.Time
}

// evictedPods are the evicted pods in the order seen, each with its
// replacement: the first pod of its app made at or after its eviction
// (the API server's times are whole seconds) that replaces no earlier
// victim.
func (l *podLog) evictedPods() []victim {
	l.mu.Lock()
	defer l.mu.Unlock()
	var all []*podSeen
	for _, s := range l.pods {
		all = append(all, s)
	}
	sort.Slice(all, func(i, j int) bool {
		if !all[i].created.Equal(all[j].created) {
			return all[i].created.Before(all[j].created)
		}
		return all[i].name < all[j].name
	})
	taken := map[*podSeen]bool{}
	var out []victim
	for _, s := range l.evictedSeen {
		v := victim{app: s.app, by: s.by, threshold: s.threshold, evictedAt: s.evictedAt}
		for _, c := range all {
			if c == s || taken[c] || c.app != s.app || c.created.Before(s.evictedAt.Truncate(time.Second)) {
				continue
			}
			taken[c] = true
			v.replacedOn, v.replacementReady = c.node, c.ready
			break
		}
		out = append(out, v)
	}
	return out
}

// Outcomes of an evicted pod's shutdown, from its container's termination:
// the drain run to its end (exit 0); SIGTERM seen and the drain cut short
// (a failed exit whose log, the termination message, has the drain's first
// line); killed with no SIGTERM seen; OOM-killed; not seen.
const (
	shutdownDrained  = "drained (SIGTERM, exit 0)"
	shutdownCut      = "SIGTERM, drain cut short"
	shutdownNoTerm   = "killed, no SIGTERM seen"
	shutdownOOM      = "OOM-killed"
	shutdownNotSeen  = "not seen"
	stressDrainStart = "stop=SIGTERM"
)

// shutdowns counts the evicted pods by the outcome of their shutdown.
func (l *podLog) shutdowns() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for _, s := range l.evictedSeen {
		out[shutdownOf(s.stop)]++
	}
	return out
}

// shutdownOf is the outcome of a shutdown that ended in stop.
func shutdownOf(stop *corev1.ContainerStateTerminated) string {
	switch {
	case stop == nil:
		return shutdownNotSeen
	case stop.Reason == "OOMKilled":
		return shutdownOOM
	case stop.ExitCode == 0:
		return shutdownDrained
	case strings.Contains(stop.Message, stressDrainStart):
		return shutdownCut
	default:
		return shutdownNoTerm
	}
}

// killedFor counts the containers of every app terminated for reason
// other than for an eviction or deletion.
func (l *podLog) killedFor(reason string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.killed {
		n += m[reason]
	}
	return n
}
