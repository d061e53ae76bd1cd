#!/bin/bash
# Interleaved before/after rounds of the static binaries that `compare.sh --out DIR` builds: every round runs
# before and after, with 1 and 2 threads, pinned to the same cores, and prints the load average and the VM's
# steal ticks beside each block (a shared machine's numbers mean little without them).
#   bench/runtime/rounds.sh DIR > out.txt; /usr/bin/python3 bench/runtime/rounds_summary.py out.txt
# Environment: CPUS (default 0,1), ROUNDS of bench-decode (default 6), BR_ROUNDS of bench-runtime (default 2).
set -u
dir=${1:?usage: rounds.sh DIR (from compare.sh --out DIR)}
CPUS=${CPUS:-0,1}
steal() { awk '/^cpu /{print $9}' /proc/stat; }
for r in $(seq 1 "${ROUNDS:-6}"); do
  for v in before after; do
    for t in 1 2; do
      s0=$(steal)
      echo "== round $r $v threads $t load $(cut -d' ' -f1-3 /proc/loadavg)"
      b="taskset -c $CPUS $dir/bench-decode-$v --threads $t"
      $b --context 32 --steps 64 --reps 5 --conc 1 2>&1 | grep -E "^decode"          # one sequence first after start
      $b --context 32 --steps 64 --reps 5 --conc 16,1 2>&1 | grep -E "^decode|ratio" # 16, then one after them
      $b --context 512 --steps 32 --reps 5 --conc 1,16 2>&1 | grep -E "^decode|ratio"
      echo "steal ticks $(($(steal) - s0))"
    done
  done
done
for r in $(seq 1 "${BR_ROUNDS:-2}"); do
  for v in before after; do
    for t in 1 2; do
      echo "== bench-runtime round $r $v threads $t prompt 32"
      taskset -c "$CPUS" "$dir/bench-runtime-$v" --threads $t --prompt 32 --steps 32 --reps 3 --no-memory 2>&1 |
        grep -E "^\|" | head -8
    done
  done
done
