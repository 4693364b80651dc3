#!/usr/bin/env bash
# Does the search still pay after fine-tuning? SmolLM2-135M at 8x (8k -> 64k): the CPU 8x winner
# (experiments/results/extend-8x-cpu-factors.json, trial 18 of study extend-smollm2-135m-65536,
# the factors the 8x table ships), YaRN-cd and PI, fine-tuned alike: the same Perl manual windows
# in the same order (seed 1), the same steps and schedule, PoSE to 64k from 8k real tokens, mixed
# windows (a fifth of the samples inside the 8k window under the original RoPE).
#
# Resumable: run it again after an interruption. A finished run (its model directory written) is
# skipped; an unfinished one resumes from its newest Trainer checkpoint (every 8 steps). The order
# answers the question first: the searched and YaRN-cd runs, the same pair as LoRA adapters, PI.
#
#   nohup nice -n 10 bash experiments/finetune_8x.sh > finetune-8x.log 2>&1 &
#   python experiments/finetune_losses.py experiments/runs/finetune-8x   # at any time: the logs
#
# Sizing (128 steps x 8192 tokens = 1.05M tokens a run): a step costs 98.5 s on a 2-core Zen 4
# alone (bench/results/finetune.txt), about 3.5 h a run. The learning rate is the references'
# (LongRoPE, PoSE, YaRN, LongRoPE2: 2e-5, linear decay; here 10 warm-up steps as PoSE).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-experiments/runs/finetune-8x}
mkdir -p "$runs"
common=(--steps 128 --learning-rate 2e-5 --warmup-steps 10 --pose-tokens 8192 --short-share 0.2
        --save-steps 8 --seed 1 --corpus perl-doc --target-length 65536)

one() {  # NAME ARGS...: one run (ARGS after the common ones win), skipped once written
    local name=$1
    shift
    if [ -f "$runs/$name/config.json" ]; then
        echo "finetune-8x: $name done"
        return 0
    fi
    echo "finetune-8x: $name from $(date -u +%FT%TZ) on $(lscpu | sed -n 's/^Model name: *//p')"
    longrope-opt finetune "${common[@]}" "$@" --output "$runs/$name"
    echo "finetune-8x: $name finished $(date -u +%FT%TZ)"
}

one searched --factors experiments/results/extend-8x-cpu-factors.json
one yarn-cd --method yarn-cd
# LoRA trains far fewer weights: its usual learning rate is 10x full fine-tuning's
one searched-lora16 --factors experiments/results/extend-8x-cpu-factors.json --lora 16 --learning-rate 2e-4
one yarn-cd-lora16 --method yarn-cd --lora 16 --learning-rate 2e-4
one pi --method pi
