#!/usr/bin/env bash
# Runs Headroom's scheduler_perf workloads (test/perf) for kube-scheduler's
# default profile and the shipped Headroom profile. By default all the
# profiles share one scheduler, the pods given to them in turn, and each
# profile's scheduling cycle is timed: it prints the median of the runs'
# ratios of the mean cycles (docs/performance.md, "Method: one scheduler
# for all the profiles"). SchedulingBasic
# at 5000 and 15000 nodes, TightFleet at 5000 and 15000 nodes, MixedFleet,
# Churn and OnePodPerNode run PERF_RUNS times (default 3). Needs bin/etcd (make tools).
#
#   PERF_WORKLOADS  a regexp of the workloads to run, e.g. 'SchedulingBasic-5000Nodes_'
#                   or '(SchedulingBasic|TightFleet)-15000Nodes_'
#                   (the unmeasured warm-up workload always runs first)
#   PERF_PROFILES   the profiles, the baseline first (default Default,Headroom; the
#                   variants are listed in test/perf/perf_test.go, e.g. HeadroomNoNodeIPs,
#                   or HeadroomNoSpread and HeadroomNoSpreadUnbatched for opportunistic
#                   batching, which only PERF_SHARED=0 compares)
#   PERF_SHARED     1 (default): the shared method (test/perf/shared_test.go); 0: each
#                   profile in runs of its own, interleaved, printing pods/s of each, their
#                   ratio and the process heap
#   PERF_ORDER      with PERF_SHARED=0: abba (default: the order within a pair turns
#                   every run) or ab
#   PERF_BENCH      a -bench regexp instead of PERF_WORKLOADS
#   PERF_DATA_DIR   keep the harness's data items there: a JSON file with every
#                   metric per label (each extension point, each plugin) and run
#   MINOR           a Kubernetes minor of hack/k8s-minors.txt (default: the default
#                   build's): the scheduler, its framework and the harness's API server
#                   are that minor's (its go.mod and build tag, hack/lib.sh)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$HEADROOM_ROOT"
[[ -x "$BIN_DIR/etcd" ]] || { echo "bin/etcd is missing: run make tools" >&2; exit 1; }
export PATH="$BIN_DIR:$PATH"
export KUBE_CACHE_MUTATION_DETECTOR=false
# The harness's etcd keeps its data under TMPDIR: in memory (/dev/shm) the
# disk's fsync latency, which varies run to run, stays out of the figures.
if [[ -z ${TMPDIR:-} && -d /dev/shm && -w /dev/shm ]]; then
  export TMPDIR=/dev/shm
fi
# The harness writes each workload's log under ARTIFACTS (kept only when it fails).
if [[ -z ${ARTIFACTS:-} ]]; then
  ARTIFACTS=$(mktemp -d) made_artifacts=1
fi
export ARTIFACTS
bench=${PERF_BENCH:-BenchmarkPerfScheduling}
if [[ -z ${PERF_BENCH:-} && -n ${PERF_WORKLOADS:-} ]]; then
  bench="BenchmarkPerfScheduling/(Warmup-|${PERF_WORKLOADS})"
fi
profiles=${PERF_PROFILES:-Default,Headroom}
case ${PERF_SHARED:=1} in
  1) shared=true ;;
  0) shared=false ;;
  *) echo "PERF_SHARED=${PERF_SHARED}: want 1 (the shared method) or 0" >&2; exit 2 ;;
esac
out=$(mktemp)
# Everything the harness makes under TMPDIR goes in one directory of its own, so
# that an interrupted run (Ctrl-C reaches the harness's etcd too, and the
# test binary then waits on it for good) still leaves no process and no data
# behind.
run_tmp=$(mktemp -d "${TMPDIR:-/tmp}/headroom-perf.XXXXXX")
export TMPDIR=$run_tmp
# The output is summarised below; ARTIFACTS, when made here, holds the logs
# of failed workloads only: it goes when it is empty.
cleanup() {
  # The test binary lives under the run's directory and its etcd keeps its
  # data there: they are the processes that name it.
  if pkill -f -- "$run_tmp" 2>/dev/null; then
    for _ in $(seq 50); do pgrep -f -- "$run_tmp" >/dev/null || break; sleep 0.1; done
    pkill -KILL -f -- "$run_tmp" 2>/dev/null || true
  fi
  wait 2>/dev/null || true
  rm -rf "$run_tmp"
  rm -f "$out"
  if [[ -n ${made_artifacts:-} ]] && ! rmdir "$ARTIFACTS" 2>/dev/null; then
    echo "logs of the failed or interrupted workloads: $ARTIFACTS" >&2
  fi
}
trap cleanup EXIT
trap 'echo "interrupted: stopping the harness and its etcd" >&2; exit 130' INT TERM
echo "Kubernetes $K8S_VERSION (minor $BUILD_MINOR); load before: $(uptime)"
# The run goes in the background so that this script takes Ctrl-C at once:
# the harness's etcd dies of it, and the test binary would wait on that etcd
# for good; cleanup stops both.
status=$run_tmp/go-test.status
{
  rc=0
  go test "${MINOR_GOFLAGS[@]}" -tags "$MINOR_TAG" -run '^$' -bench "$bench" -benchtime=1x -timeout 3h ./test/perf/ \
    -perf-runs "${PERF_RUNS:-3}" -perf-profiles "$profiles" -perf-order "${PERF_ORDER:-abba}" \
    -perf-shared="$shared" \
    ${PERF_DATA_DIR:+-data-items-dir "$(realpath -m "$PERF_DATA_DIR")"} || rc=$?
  echo "$rc" >"$status"
} 2>&1 | tee "$out" &
wait $!
go_status=$(cat "$status" 2>/dev/null || echo 1)
echo "load after: $(uptime)"
[[ $go_status == 0 ]] || exit "$go_status"
echo
# Opportunistic batching, per run and profile (test/perf/batching_test.go;
# from 1.37, whose harness lets the counters be read): attempts by result,
# the 1.37 rescores and the reasons its state was dropped.
print_batching() {
  if grep -q '^batching: ' "$out"; then
    echo
    echo "opportunistic batching, per run and profile:"
    sed -n 's/^batching: /  /p' "$out"
  fi
}
if [[ $shared == true ]]; then
  # The benchmark printed the shared runs' table; again, at the end.
  sed -n '/^shared scheduler:/,/^\(PASS\|FAIL\|ok\|---\)/{/^\(PASS\|FAIL\|ok\|---\)/!p}' "$out"
  print_batching
  exit 0
fi
summarize() {
  awk -v profiles="$profiles" "$AWK_MEDIAN"'
    BEGIN { np = split(profiles, prof, ",") }
    $1 ~ /^BenchmarkPerfScheduling\// {
      split($1, p, "/"); n = split(p[2], c, "_")
      wl = c[1]; pr = c[2]; run = c[3]
      if (wl ~ /^Warmup-/) next
      for (i = 2; i <= NF; i++) {
        if ($i == "SchedulingThroughput/Average") { tput[wl, pr] = tput[wl, pr] " " $(i-1); runtput[wl, pr, run] = $(i-1) }
        if ($i == "heap_memory_usage/Max") heap[wl, pr] = heap[wl, pr] " " $(i-1)
      }
      if (!((wl, run) in seenrun)) { seenrun[wl, run] = 1; runs[wl] = runs[wl] " " run }
      if (!(wl in seen)) { seen[wl] = 1; order[++nw] = wl }
    }
    END {
      base = prof[1]
      printf "%-28s %-18s %5s %12s %12s %7s %7s %10s %10s  %s\n", "workload", "profile", "runs", "base pods/s", "pods/s", "ratio", "pair", "base heap", "heap MB", "pairs (" base "/profile, pods/s)"
      for (k = 1; k <= nw; k++) {
        wl = order[k]
        for (q = 2; q <= np; q++) {
          pr = prof[q]
          d = median(tput[wl, base]); h = median(tput[wl, pr])
          pairs = ""; ratios = ""
          nr = split(runs[wl], rr, " ")
          for (r = 1; r <= nr; r++) {
            pairs = pairs sprintf(" %s/%s", runtput[wl, base, rr[r]], runtput[wl, pr, rr[r]])
            if (runtput[wl, base, rr[r]] > 0) ratios = ratios " " runtput[wl, pr, rr[r]] / runtput[wl, base, rr[r]]
          }
          printf "%-28s %-18s %5d %12.1f %12.1f %7.3f %7.3f %10.0f %10.0f %s\n", wl, pr, nr, d, h, (d > 0 ? h / d : 0), median(ratios), median(heap[wl, base]), median(heap[wl, pr]), pairs
        }
      }
    }' "$1"
}
echo "median over runs. ratio: median pods/s over median base pods/s; pair: the median of each run's own ratio"
echo "(a pair ran back to back, so drift of the machine between pairs cancels out in it)."
echo "heap is the harness's heap_memory_usage/Max of the whole test process (kube-apiserver included)"
summarize "$out"
print_batching
rm -f "$out"
