#!/usr/bin/env bash
# The Gemma 3 270M runs (2x and 4x), as two lanes that share a 2-core machine, each resumed by
# running it again: every stage below stores what it measured in its study, so a rerun after an
# interruption measures only what is missing (at most the forward that was running).
#
#   experiments/gemma3_runs.sh 64k  PROSE [OUT]  # 2x: extend, validate
#   experiments/gemma3_runs.sh 128k PROSE [OUT]  # 4x: extend (warm-started from 2x trial 8), validate
#
# PROSE is the held-out books folder made by html_corpus.py (see docs/results.md); OUT is where
# `extend` writes the extended model directories (default: the current folder). One thread a
# lane: two one-thread processes do more work than one two-thread process on 2 cores
# (bench/results/contention.txt); a lane left alone runs with THREADS=2. The 4x table's classic
# rows do not depend on the 4x search: the 2x lane measured them into the 4x study's database
# while the 4x search ran, and the 4x validation found them there. Once the 4x search had ended
# both lanes' validations were measuring the same cells at once, so the 4x lane alone measures
# what is left. `extend`'s own validation runs fused and `validate` eager, which differ
# (bench/fusion_numerics.py): each table measures again, eager, what only `extend` measured
# (relabelled by experiments/relabel_fused_records.py), so each of its cells has one compute path.
set -euo pipefail
lane=${1:?usage: $0 64k|128k PROSE [OUT]}
prose=$(realpath "${2:?usage: $0 64k|128k PROSE [OUT]}")
out=$(realpath "${3:-.}")
cd "$(dirname "$0")/.."  # after the paths: they are the caller's
results=experiments/results
classic=pi,ntk,yarn,yarn-cd,ntk-cd
# the 2x guarded winner carried to 4x (derived_factors.py carry): its fast bands were chosen on
# prose and code together, the 4x search's on code alone (docs/results.md, per frequency band)
carried=$results/extend-gemma3-64k-guarded-carried-128k.json
# THREADS=2 once the other lane has ended: a lone lane would leave a core idle
threads=${THREADS:-1}
run() { echo "[gemma3_runs $lane] $(date -u +%FT%TZ) $*"; OMP_NUM_THREADS=$threads nice -n 10 "$@"; }

case $lane in
64k)
    run longrope-opt extend gemma3-270m --to 64k --trials 12 --held-out "$prose" \
        --passkey-form branched --storage "sqlite:///$results/extend-gemma3-64k.db" --out "$out/out-gemma3-64k"
    run longrope-opt validate --study-name extend-gemma3-270m-65536 \
        --storage "sqlite:///$results/extend-gemma3-64k.db" --corpus "$prose" --docs 5 --lengths 64k \
        --classic "$classic" --keys 20 --passkey-form branched --remeasure-other-paths \
        --output "$results/validate-gemma3-64k"
    ;;
128k)
    run longrope-opt extend gemma3-270m --to 128k --trials 12 \
        --warm-start "$results/extend-gemma3-64k-trial8-factors.json" --held-out "$prose" \
        --passkey-form branched --storage "sqlite:///$results/extend-gemma3-128k.db" --out "$out/out-gemma3-128k"
    run longrope-opt validate --study-name extend-gemma3-270m-131072 \
        --storage "sqlite:///$results/extend-gemma3-128k.db" --corpus "$prose" --docs 3 --lengths 128k \
        --classic "$classic" --factors "$carried" --keys 20 --passkey-form branched \
        --remeasure-other-paths --output "$results/validate-gemma3-128k"
    ;;
*)
    echo "usage: $0 64k|128k PROSE [OUT]" >&2
    exit 2
    ;;
esac
