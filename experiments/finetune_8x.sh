#!/usr/bin/env bash
# Does the search still pay after fine-tuning? SmolLM2-135M at 8x (8k -> 64k): the CPU 8x winner
# (experiments/results/extend-8x-cpu-factors.json, trial 18 of study extend-smollm2-135m-65536,
# the factors the 8x table ships), YaRN-cd and PI, fine-tuned alike: the same Perl manual windows
# in the same order (seed 1), the same steps and schedule, PoSE to 64k from 8k real tokens, mixed
# windows (a fifth of the samples inside the 8k window under the original RoPE). Then each pair
# validated on the 8x table's held-out Rust books: at 64k beside the rows measured before
# fine-tuning (read from the study's store), 20 branched passkeys a row; at 4k against the base.
#
# Resumable: run it again after an interruption. A finished run (its model directory written) is
# skipped; an unfinished one resumes from its newest Trainer checkpoint (every 8 steps); the
# validations reuse every measurement stored. The order answers the question first: the searched
# and YaRN-cd runs and their validation, the same pair as LoRA adapters, PI.
#
#   nohup nice -n 10 bash experiments/finetune_8x.sh >> experiments/runs/finetune-8x.log 2>&1 &
#   python experiments/finetune_losses.py experiments/runs/finetune-8x \
#       --out experiments/results/finetune-8x     # at any time: the loss logs, to commit
#
# Sizing (128 steps x 8192 tokens = 1.05M tokens a run): a step costs 98.5 s on a 2-core Zen 4
# alone (bench/results/finetune.txt), about 3.5 h a run. The learning rate is the references'
# (LongRoPE, PoSE, YaRN, LongRoPE2: 2e-5, linear decay; here 10 warm-up steps as PoSE).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-experiments/runs/finetune-8x}
prose=${PROSE:-experiments/runs/prose}
results=experiments/results/finetune-8x
mkdir -p "$runs" "$results"
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

judge() {  # TAG CLASSIC NAME...: the fine-tuned models at 64k beside the rows before, and at 4k
    local tag=$1 classic=$2
    shift 2
    local models=()
    for name in "$@"; do models+=(--models "$runs/$name"); done
    if [ ! -d "$prose" ]; then  # the 8x table's held-out books: the Rust toolchain's
        python experiments/html_corpus.py "$(rustc --print sysroot)"/share/doc/rust/html/{book,cargo,reference,rustc,error_codes,nomicon,edition-guide,embedded-book}/print.html --out "$prose"
    fi
    echo "finetune-8x: validating $tag from $(date -u +%FT%TZ)"
    longrope-opt validate --study-name extend-smollm2-135m-65536 \
        --storage sqlite:///experiments/results/extend-8x-cpu.db --corpus "$prose" --docs 3 \
        --lengths 64k --classic "$classic" "${models[@]}" --passkey-form branched --keys 20 \
        --output "$results/validate-64k-$tag"
    longrope-opt validate --model smollm2-135m --classic none "${models[@]}" \
        --storage "sqlite:///$results/measurements.db" --corpus "$prose" --docs 5 \
        --lengths 4k --keys 0 --output "$results/validate-4k-$tag"
}

one searched --factors experiments/results/extend-8x-cpu-factors.json
one yarn-cd --method yarn-cd
judge full yarn-cd searched yarn-cd
# LoRA trains far fewer weights: its usual learning rate is 10x full fine-tuning's
one searched-lora16 --factors experiments/results/extend-8x-cpu-factors.json --lora 16 --learning-rate 2e-4
one yarn-cd-lora16 --method yarn-cd --lora 16 --learning-rate 2e-4
judge lora yarn-cd searched-lora16 yarn-cd-lora16
one pi --method pi
judge all pi,yarn-cd searched yarn-cd searched-lora16 yarn-cd-lora16 pi
