#!/usr/bin/env bash
# Runs Headroom's scheduler_perf workloads (test/perf) for kube-scheduler's
# default profile and the shipped Headroom profile, interleaved, and prints
# pods/s of both, their ratio and the process heap. SchedulingBasic at 5000
# nodes runs PERF_RUNS times per profile (default 3); the table shows the
# median. Needs bin/etcd (make tools). PERF_BENCH narrows the workloads
# (a -bench regexp, e.g. 'BenchmarkPerfScheduling/SchedulingBasic-500Nodes_').
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$HEADROOM_ROOT"
[[ -x "$BIN_DIR/etcd" ]] || { echo "bin/etcd is missing: run make tools" >&2; exit 1; }
export PATH="$BIN_DIR:$PATH"
export KUBE_CACHE_MUTATION_DETECTOR=false
# The harness writes each workload's log under ARTIFACTS (kept only when it fails).
export ARTIFACTS=${ARTIFACTS:-$(mktemp -d)}
out=$(mktemp)
echo "load before: $(uptime)"
go test -run '^$' -bench "${PERF_BENCH:-BenchmarkPerfScheduling}" -benchtime=1x -timeout 3h \
  ./test/perf/ -perf-runs "${PERF_RUNS:-3}" 2>&1 | tee "$out"
echo "load after: $(uptime)"
echo
summarize() {
  awk '
    $1 ~ /^BenchmarkPerfScheduling\// {
      split($1, p, "/"); n = split(p[2], c, "_")
      wl = c[1]
      prof = c[2]
      for (i = 2; i <= NF; i++) {
        if ($i == "SchedulingThroughput/Average") tput[wl, prof] = tput[wl, prof] " " $(i-1)
        if ($i == "heap_memory_usage/Max") heap[wl, prof] = heap[wl, prof] " " $(i-1)
      }
      if (!(wl in seen)) { seen[wl] = 1; order[++nw] = wl }
    }
    function median(s,   a, n, i, j, t) {
      n = split(s, a, " ")
      if (n == 0) return 0
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
      return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    END {
      printf "%-28s %6s %14s %14s %7s %16s %16s\n", "workload", "runs", "default pods/s", "Headroom pods/s", "ratio", "default heap MB", "Headroom heap MB"
      for (k = 1; k <= nw; k++) {
        wl = order[k]
        d = median(tput[wl, "Default"]); h = median(tput[wl, "Headroom"])
        runs = split(tput[wl, "Headroom"], tmp, " ")
        printf "%-28s %6d %14.1f %14.1f %7.3f %16.0f %16.0f\n", wl, runs, d, h, (d > 0 ? h / d : 0), median(heap[wl, "Default"]), median(heap[wl, "Headroom"])
      }
    }' "$1"
}
echo "median over runs; heap is the harness's heap_memory_usage/Max of the whole test process (kube-apiserver included)"
summarize "$out"
rm -f "$out"
