#!/usr/bin/env bash
# The long tables of issues 18 and 19, filled over several sittings on machines that may not survive between them
# (see README.md here). Run from the repository root.
#   bash docs/results/runs/tables.sh start     restore the archives, then train in the background (log: $RUNS/queue.log)
#   bash docs/results/runs/tables.sh archive   archive what finished into docs/results/runs/ (then commit it)
#   bash docs/results/runs/tables.sh status    how far each table has come
#   bash docs/results/runs/tables.sh pause-for STAGE PATTERN
#        wait until the queue runs STAGE (e.g. cost, decode-cost: speed measurements), SIGSTOP the processes that
#        match PATTERN (pgrep -f; e.g. a side run's "lambdas=") while it runs, then SIGCONT them
# The recipes run from a worktree at $COMMIT, so that every run of a table is trained by the same code.
set -euo pipefail
COMMIT=${COMMIT:-8b4165d}
RUNS=${RUNS:-$(cd .. && pwd)/runs}
QUEUE=${QUEUE:-$(cd .. && pwd)/queue}
HERE=docs/results/runs
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# name recipe config extra-arguments (in the order they train)
TABLES=(
  "struct-multi30k structural-pe examples/structural-pe-multi30k.toml"
  # issue 18's second table before the DPE tables: issue 19 needs all three DPE tables and struct-europarl's baselines
  # anyway, so this order finishes issue 18 about 6 h sooner and issue 19 no later
  "struct-europarl structural-pe examples/structural-pe-europarl.toml --set experiment.reuse_runs=[]"
  # the built-in DPE table at the pinned commit (training alignments from the training pairs alone; ~40 min)
  "dpe-builtin dpe examples/dpe-builtin.toml"
  "dpe-multi30k dpe examples/dpe-multi30k.toml --only table2 table3 table5 xl"
  # the baselines: struct-europarl's (adopted with their checkpoints on the machine that trained them, or their results
  # after a restore: tests/test_reuse.py::test_dpe_takes_its_baseline_from_structural_pe)
  "dpe-europarl dpe examples/dpe-europarl.toml --only table3 table5 --set experiment.reuse_runs=['$RUNS/struct-europarl']"
)

case "${1:-}" in
  start)
    [ -d "$QUEUE" ] || git worktree add --detach "$QUEUE" "$COMMIT"
    [ "$(git -C "$QUEUE" rev-parse --short=7 HEAD)" = "${COMMIT:0:7}" ] || { echo "$QUEUE is not at $COMMIT" >&2; exit 1; }
    # the code is $COMMIT's; the tables' configs are this checkout's (a config may gain what the recipe measures beside
    # the runs, e.g. cost_rounds; a change to anything a run's training or evaluation reads shows as runs training anew)
    for t in "${TABLES[@]}"; do set -- $t; cp "$3" "$QUEUE/$3"; done
    mkdir -p "$RUNS"
    for t in "${TABLES[@]}"; do
      set -- $t
      if [ -f "$HERE/$1/manifest.json" ]; then xlpe experiment restore "$HERE/$1" --into "$RUNS/$1"; fi
    done
    (
      cd "$QUEUE"
      for t in "${TABLES[@]}"; do
        set -- $t
        name=$1 recipe=$2 config=$3; shift 3
        PYTHONPATH="$QUEUE/src" python -m xlpe.cli experiment "$recipe" --config "$config" --out "$RUNS/$name" "$@" || exit 1
      done
    ) >> "$RUNS/queue.log" 2>&1 &
    echo "training in the background (pid $!); log: $RUNS/queue.log"
    ;;
  archive)
    for t in "${TABLES[@]}"; do
      set -- $t
      if [ -d "$RUNS/$1" ]; then xlpe experiment archive "$RUNS/$1" --to "$HERE/$1"; fi
    done
    ;;
  pause-for)
    stage=$2 pattern=$3 log="$RUNS/queue.log"
    start=$(wc -l < "$log")
    until tail -n +"$start" "$log" | grep -q "stage $stage: running"; do sleep 5; done
    pids=""
    for p in $(pgrep -f -- "$pattern" || true); do     # not this script (its own command line holds the pattern)
      grep -q tables.sh "/proc/$p/cmdline" 2>/dev/null || pids="$pids $p"
    done
    echo "$(date +%T) $stage is running: stopping${pids:- nothing}"
    [ -z "$pids" ] || { kill -STOP $pids 2>/dev/null || true; trap "kill -CONT $pids 2>/dev/null" EXIT; }
    line=$(grep -n "stage $stage: running" "$log" | tail -1 | cut -d: -f1)
    until tail -n +"$((line + 1))" "$log" | grep -q "stage .*: running\|stage .*: cached\|^report: "; do sleep 5; done
    echo "$(date +%T) $stage has finished: continuing${pids:- nothing}"
    ;;
  status)
    for t in "${TABLES[@]}"; do
      set -- $t
      if [ -d "$RUNS/$1" ]; then xlpe experiment status "$RUNS/$1" | sed -n 1,3p; fi
    done
    ;;
  *) sed -n 2,10p "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
