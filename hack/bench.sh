#!/usr/bin/env bash
# Runs Headroom's micro-benchmarks (allocations reported) and prints, for every
# benchmark that has a baseline measured in the same run, the ratio to it.
# A baseline is a benchmark named Benchmark<Name>Baseline... in the same
# package with the same sub-benchmark (e.g. pods=110): usually the in-tree
# plugin doing comparable work, so that the ratio, not the machine's speed,
# is what the numbers say.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$HEADROOM_ROOT"
out=$(mktemp)
go test -run '^$' -bench "${BENCH:-.}" -benchmem -count "${COUNT:-1}" ./pkg/... ./plugins/... | tee "$out"
echo
echo "ratios to the baseline measured in the same run, medians over the -count runs (ns/op; CPU time where reported):"
awk "$AWK_MEDIAN"'
  /^pkg: / { pkg = $2 }
  /^Benchmark/ && $4 == "ns/op" {
    name = $1; sub(/-[0-9]+$/, "", name)
    split(name, parts, "/"); base = parts[1]; sub_ = substr(name, length(base) + 1)
    k = pkg " " name
    ns[k] = ns[k] " " $3; runs[k]++; bases[k] = base; subs[k] = sub_
    for (i = 5; i < NF; i += 2) if ($(i + 1) == "cpu-ns/op") cpu[k] = cpu[k] " " $i
  }
  END {
    for (k in ns) {
      split(k, kp, " "); pkg = kp[1]
      if (bases[k] ~ /Baseline/) continue
      for (b in ns) {
        split(b, bp, " ")
        if (bp[1] == pkg && bases[b] ~ /Baseline/ && subs[b] == subs[k] && index(bases[b], bases[k]) == 1)
          printf "  %-60s %8.2fx %s, %d and %d runs%s\n", kp[2], median(ns[k]) / median(ns[b]), bp[2], runs[k], runs[b],
            (k in cpu && b in cpu && median(cpu[b]) > 0) ? sprintf(" (CPU time: %.0f against %.0f ms/op, %.2fx)", median(cpu[k]) / 1e6, median(cpu[b]) / 1e6, median(cpu[k]) / median(cpu[b])) : ""
      }
    }
  }' "$out" | sort
rm -f "$out"
