//go:build e2ebench

package e2ebench

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// stackRun is one run of a part with one stack: stack is "A" or "B", n
// counts the stack's runs of the part from 1.
type stackRun[R any] struct {
	stack string
	n     int
	r     R
}

// row is one line of a part's tables: text renders a run's value; num,
// where set, is the figure whose median and range the summary shows per
// stack (ok false: the run has none, e.g. never crossed the line).
type row[R any] struct {
	name string
	text func(R) string
	num  func(R) (float64, bool)
}

// countRow is a row of a count, rendered as the count.
func countRow[R any](name string, f func(R) int) row[R] {
	return row[R]{name: name, text: func(r R) string { return strconv.Itoa(f(r)) }, num: func(r R) (float64, bool) { return float64(f(r)), true }}
}

// textRow is a row with no figure to summarize.
func textRow[R any](name string, f func(R) string) row[R] {
	return row[R]{name: name, text: f}
}

// reactionRow is the time from a run's crossing of the line (crossed; < 0:
// never) to its first eviction, asked by whomever (the API server's
// DisruptionTarget time, whole seconds): the reaction the victims row
// names the author of. Runs that did not cross or evicted nothing have none.
func reactionRow[R any](name string, crossed func(R) time.Duration, log func(R) *podLog) row[R] {
	reaction := func(r R) (time.Duration, bool) { return reactionTime(crossed(r), log(r)) }
	return row[R]{name: name, text: func(r R) string {
		d, ok := reaction(r)
		if !ok {
			return "none"
		}
		return fmt.Sprintf("%.1f", d.Seconds())
	}, num: func(r R) (float64, bool) {
		d, ok := reaction(r)
		return math.Round(d.Seconds()*10) / 10, ok
	}}
}

// reactionTime is the time from a run's crossing of the line (crossed;
// < 0: never) to its first eviction; false where the run did not cross or
// evicted nothing.
func reactionTime(crossed time.Duration, l *podLog) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.firstEviction - crossed, crossed >= 0 && l.firstEviction >= 0
}

// writeRuns writes every run side by side (a column per run, in the order
// run), then, for the rows with a figure, each stack's median and range
// over its runs.
func writeRuns[R any](b *strings.Builder, runs []stackRun[R], rows []row[R]) {
	b.WriteString("| |")
	for _, r := range runs {
		fmt.Fprintf(b, " %s, run %d |", r.stack, r.n)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(runs)) + "\n")
	for _, rw := range rows {
		fmt.Fprintf(b, "| %s |", rw.name)
		for _, r := range runs {
			fmt.Fprintf(b, " %s |", rw.text(r.r))
		}
		b.WriteString("\n")
	}
	stacks := []string{}
	for _, r := range runs {
		if !slices.Contains(stacks, r.stack) {
			stacks = append(stacks, r.stack)
		}
	}
	b.WriteString("\nMedian over each stack's runs, and the range (lowest–highest):\n\n| |")
	for _, s := range stacks {
		fmt.Fprintf(b, " %s |", s)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(stacks)) + "\n")
	for _, rw := range rows {
		if rw.num == nil {
			continue
		}
		fmt.Fprintf(b, "| %s |", rw.name)
		for _, s := range stacks {
			var xs []float64
			missing := 0
			for _, r := range runs {
				if r.stack != s {
					continue
				}
				if x, ok := rw.num(r.r); ok {
					xs = append(xs, x)
				} else {
					missing++
				}
			}
			fmt.Fprintf(b, " %s |", spread(xs, missing))
		}
		b.WriteString("\n")
	}
}

// spread renders the median of xs and their range, and how many runs had
// no figure.
func spread(xs []float64, missing int) string {
	var out string
	switch len(xs) {
	case 0:
		out = "—"
	case 1:
		out = num(xs[0])
	default:
		out = fmt.Sprintf("%s (%s–%s)", num(median(xs)), num(slices.Min(xs)), num(slices.Max(xs)))
	}
	if missing > 0 {
		out += fmt.Sprintf("; %d run(s) without", missing)
	}
	return out
}

// median is the middle of xs, or the mean of the two middle ones.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// num renders a whole number as one, anything else with one decimal.
func num(x float64) string {
	if x == math.Trunc(x) {
		return strconv.FormatFloat(x, 'f', 0, 64)
	}
	return strconv.FormatFloat(x, 'f', 1, 64)
}
