#!/usr/bin/env bash
# The long tables, filled over several sittings on machines that may not survive between them (see README.md here).
# Run from the repository root.
#   bash docs/results/runs/tables.sh start     restore the archives, then train in the background (log: $RUNS/queue.log)
#   bash docs/results/runs/tables.sh archive   archive what finished into docs/results/runs/ (then commit it)
#   bash docs/results/runs/tables.sh status    how far each table has come
#   bash docs/results/runs/tables.sh pause-for STAGE PATTERN
#        wait until the queue runs STAGE (e.g. cost, decode-cost: speed measurements), SIGSTOP the processes that
#        match PATTERN (pgrep -f; e.g. a side run's "lambdas=") while it runs, then SIGCONT them
# Each table's recipe runs from a worktree at its commit ($QUEUE-<commit>), so every run of a table is trained by the
# same code. start trains the tables that are not complete (ONLY="name ..." narrows them).
set -euo pipefail
RUNS=${RUNS:-$(cd .. && pwd)/runs}
QUEUE=${QUEUE:-$(cd .. && pwd)/queue}
HERE=docs/results/runs
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# commit name recipe config extra-arguments (in the order they train); the first five are complete
TABLES=(
  "8b4165d struct-multi30k structural-pe examples/structural-pe-multi30k.toml"
  "8b4165d struct-europarl structural-pe examples/structural-pe-europarl.toml --set experiment.reuse_runs=[]"
  "8b4165d dpe-builtin dpe examples/dpe-builtin.toml"
  "8b4165d dpe-multi30k dpe examples/dpe-multi30k.toml --only table2 table3 table5 xl"
  # the baselines: struct-europarl's (adopted with their checkpoints on the machine that trained them, or their results
  # after a restore: tests/test_reuse.py::test_dpe_takes_its_baseline_from_structural_pe)
  "8b4165d dpe-europarl dpe examples/dpe-europarl.toml --only table3 table5
   --set experiment.reuse_runs=['$RUNS/struct-europarl']"
  # which encoding should I use (docs/results/compare.md): the built-in pair, then Multi30k (39 runs of ~1 h in fp32,
  # trained by 3348d4d; c9478eb has the same runs' keys and trains the decoding cost's copies: decode_cost_copies)
  "fe605ea compare-builtin compare examples/compare-builtin.toml"
  "c9478eb compare-multi30k compare examples/compare-multi30k.toml"
)
ONLY=${ONLY:-compare-builtin compare-multi30k}

case "${1:-}" in
  start)
    mkdir -p "$RUNS"
    for t in "${TABLES[@]}"; do
      set -- $t
      case " $ONLY " in *" $2 "*) ;; *) continue ;; esac
      q="$QUEUE-$1"
      [ -d "$q" ] || git worktree add --detach "$q" "$1"
      # the code is the table's commit; its config is this checkout's (a config may gain what the recipe measures
      # beside the runs; a change to anything a run's training or evaluation reads shows as runs training anew)
      cp "$4" "$q/$4"
      if [ -f "$HERE/$2/manifest.json" ]; then xlpe experiment restore "$HERE/$2" --into "$RUNS/$2"; fi
    done
    (
      for t in "${TABLES[@]}"; do
        set -- $t
        case " $ONLY " in *" $2 "*) ;; *) continue ;; esac
        q="$QUEUE-$1" name=$2 recipe=$3 config=$4; shift 4
        (cd "$q" && PYTHONPATH="$q/src" python -m xlpe.cli experiment "$recipe" --config "$config" \
          --out "$RUNS/$name" "$@") || exit 1
      done
    ) >> "$RUNS/queue.log" 2>&1 &
    echo "training in the background (pid $!); log: $RUNS/queue.log"
    ;;
  archive)
    for t in "${TABLES[@]}"; do
      set -- $t
      if [ -d "$RUNS/$2" ]; then xlpe experiment archive "$RUNS/$2" --to "$HERE/$2"; fi
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
      if [ -d "$RUNS/$2" ]; then xlpe experiment status "$RUNS/$2" | sed -n 1,3p; fi
    done
    ;;
  *) sed -n 2,10p "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
