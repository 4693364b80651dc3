#!/usr/bin/env bash
# Does the search still pay after fine-tuning? SmolLM2-135M at 8x (8k -> 64k): the CPU 8x winner
# (experiments/results/extend-8x-cpu-factors.json, trial 18 of study extend-smollm2-135m-65536,
# the factors the 8x table ships), YaRN-cd and PI, fine-tuned alike: the same Perl manual windows
# in the same order (seed 1), the same steps and schedule, PoSE to 64k from 8k real tokens, mixed
# windows (a fifth of the samples inside the 8k window under the original RoPE). Then each pair
# validated on the 8x table's held-out Rust books: at 64k beside the rows measured before
# fine-tuning (read from the study's store), 20 branched passkeys a row; at 4k against the base.
#
# Resumable: run it again after an interruption. A finished run is skipped; an unfinished one
# resumes from its newest Trainer checkpoint (every 8 steps); the validations reuse every
# measurement stored (the 4k rows in experiments/results/finetune-8x/measurements.db, the 64k
# rows in the 8x study's store, experiments/results/extend-8x-cpu.db, where the rows before
# fine-tuning were measured: on the bfloat16 path, as the fine-tuned ones are).
#
#   nohup nice -n 10 bash experiments/finetune_8x.sh >> experiments/runs/finetune-8x.log 2>&1 &
#   bash experiments/finetune_8x.sh keep    # at a stop: what carries the LoRA runs to the next
#   python experiments/finetune_losses.py experiments/runs/finetune-8x \
#       --out experiments/results/finetune-8x     # at any time: the loss logs, to commit
#
# What survives a sitting is what is committed: experiments/runs/ (git-ignored) does not. A LoRA
# run's state is small (its checkpoint holds the adapters, the norms and their optimizer moments,
# not the frozen model), so `keep` commits it: an unfinished run's newest checkpoint
# (finetune-8x/carry/NAME/), a finished run as its adapter-only model directory
# (finetune-8x/adapters/NAME/, which every command loads as the merged model). A full fine-tune's
# checkpoint is the whole model and its moments (1.6 GB): it cannot be carried, so a full run and
# its validation must fit in one sitting (its tables, committed, then mark it done). Hence the
# order: the LoRA pair (searched, YaRN-cd), each validated once written, first, then the full pair (a Xeon
# with AMX: about 1 h a run and 25 min of validation; a Zen 4: 3.4 h and 1.7 h, longer than a
# sitting), then PI.
#
# Sizing (128 steps x 8192 tokens = 1.05M tokens a run): a full step costs 98.5 s on a 2-core Zen
# 4 alone without gradient checkpointing, 120 s with it (bench/results/finetune.txt); a LoRA step
# about as much (the backward through the activations dominates, not the weight gradients). The
# learning rate is the references' (LongRoPE, PoSE, YaRN, LongRoPE2: 2e-5, linear decay; here 10
# warm-up steps as PoSE); LoRA's usual is 10x that.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-experiments/runs/finetune-8x}
prose=${PROSE:-experiments/runs/prose}
results=${RESULTS:-experiments/results/finetune-8x}
mkdir -p "$runs" "$results"
common=(--steps 128 --learning-rate 2e-5 --warmup-steps 10 --pose-tokens 8192 --short-share 0.2
        --save-steps 8 --seed 1 --corpus perl-doc --target-length 65536
        --no-gradient-checkpointing)  # 8k real tokens fit in memory (12.6 GiB): 0.82x the time

lora_runs=(searched-lora16 yarn-cd-lora16)
adapters=$results/adapters  # finished LoRA runs, adapter-only model directories (committed)
carry=$results/carry        # unfinished LoRA runs, their newest checkpoint (committed)

is_lora() { [[ " ${lora_runs[*]} " == *" $1 "* ]]; }

model_of() {  # NAME: the model directory validate loads
    if is_lora "$1" && [ -d "$adapters/$1" ]; then echo "$adapters/$1"; else echo "$runs/$1"; fi
}

keep() {  # what carries the LoRA runs to the next sitting, to commit
    local name newest
    for name in "${lora_runs[@]}"; do
        if [ -f "$runs/$name/config.json" ] && [ ! -d "$adapters/$name" ]; then
            mkdir -p "$adapters"
            cp -r "$runs/$name" "$adapters/$name.partial"
            rm -f "$adapters/$name.partial"/*.safetensors  # the merged weights; adapter/ stays
            mv "$adapters/$name.partial" "$adapters/$name"
        fi
        if [ -d "$adapters/$name" ]; then
            rm -rf "${carry:?}/$name"
            continue
        fi
        # (none yet: ls fails, and under pipefail so would the assignment)
        newest=$(ls -d "$runs/$name-checkpoints"/checkpoint-* 2>/dev/null | sort -V | tail -1 || true)
        if [ -n "$newest" ] && [ ! -d "$carry/$name/$(basename "$newest")" ]; then
            mkdir -p "$carry"
            rm -rf "${carry:?}/$name.partial"
            mkdir -p "$carry/$name.partial"
            cp -r "$newest" "$carry/$name.partial/"
            rm -rf "${carry:?}/$name"
            mv "$carry/$name.partial" "$carry/$name"
        fi
        if [ -d "$carry/$name" ]; then echo "finetune-8x: kept $name at $(ls "$carry/$name")"; fi
    done
}

one() {  # NAME ARGS...: one run (ARGS after the common ones win), skipped once written
    local name=$1
    shift
    if [ -f "$runs/$name/config.json" ] || { is_lora "$name" && [ -d "$adapters/$name" ]; }; then
        echo "finetune-8x: $name done"
        return 0
    fi
    if is_lora "$name" && [ -d "$carry/$name" ] && ! ls -d "$runs/$name-checkpoints"/checkpoint-* >/dev/null 2>&1; then
        mkdir -p "$runs/$name-checkpoints"  # a sitting's end: resume from the kept checkpoint
        cp -r "$carry/$name"/checkpoint-* "$runs/$name-checkpoints/"
    fi
    echo "finetune-8x: $name from $(date -u +%FT%TZ) on $(lscpu | sed -n 's/^Model name: *//p')"
    longrope-opt finetune "${common[@]}" "$@" --output "$runs/$name"
    echo "finetune-8x: $name finished $(date -u +%FT%TZ)"
    if is_lora "$name"; then keep; fi
}

judge() {  # TAG CLASSIC NAME...: the fine-tuned models at 64k beside the rows before, and at 4k
    local tag=$1 classic=$2
    shift 2
    local models=()
    for name in "$@"; do models+=(--models "$(model_of "$name")"); done
    if [ ! -d "$prose" ]; then  # the 8x table's held-out books: the Rust toolchain's
        python experiments/html_corpus.py "$(rustc --print sysroot)"/share/doc/rust/html/{book,cargo,reference,rustc,error_codes,nomicon,edition-guide,embedded-book}/print.html --out "$prose"
    fi
    echo "finetune-8x: validating $tag from $(date -u +%FT%TZ)"
    longrope-opt validate --model smollm2-135m --classic none "${models[@]}" \
        --storage "sqlite:///$results/measurements.db" --corpus "$prose" --docs 5 \
        --lengths 4k --keys 0 --dtype bfloat16 --output "$results/validate-4k-$tag"
    longrope-opt validate --study-name extend-smollm2-135m-65536 \
        --storage sqlite:///experiments/results/extend-8x-cpu.db --corpus "$prose" --docs 3 \
        --lengths 64k --classic "$classic" "${models[@]}" --passkey-form branched --keys 20 \
        --dtype bfloat16 --output "$results/validate-64k-$tag"
    echo "finetune-8x: validated $tag $(date -u +%FT%TZ)"
}

full_fits() {  # whether a full run and its validation fit one sitting here
    # a Xeon with AMX: about 1 h a run and 25 min of validation; a Zen 4 or 5: 3.4 h and 1.7 h,
    # longer than a sitting, and the checkpoint cannot be carried. FULL=1 forces it (a GPU:
    # bench/device run F trains the same three runs with this recipe in minutes)
    [ -n "${FULL:-}" ] || grep -qw amx_tile /proc/cpuinfo
}

full() {  # NAME CLASSIC ARGS...: a full run, judged in the sitting that trains it
    # its weights (GBs) are not committed: a run whose tables are written is not trained again
    local name=$1 classic=$2
    shift 2
    if [ -f "$results/validate-64k-full-$name.json" ]; then
        echo "finetune-8x: $name judged"
        return 0
    fi
    if ! full_fits; then
        echo "finetune-8x: $name skipped: a full run and its validation do not fit a sitting on" \
            "this CPU (no AMX); FULL=1 to force it, or bench/device run F on a GPU"
        return 0
    fi
    one "$name" "$@"
    judge "full-$name" "$classic" "$name"
}

joined() {  # TAG PARTS...: tables measured apart (each beside the same rows before), as one
    local tag=$1 length part
    shift
    for length in 4k 64k; do
        local tables=()
        for part in "$@"; do
            if [ ! -f "$results/validate-$length-$part.json" ]; then  # a part not judged yet
                echo "finetune-8x: $tag not joined: no $length table of $part yet"
                return 0
            fi
            tables+=(--from-json "$results/validate-$length-$part.json")
        done
        longrope-opt validate "${tables[@]}" --output "$results/validate-$length-$tag"
    done
}

if [ "${1:-}" = keep ]; then
    keep
    exit 0
fi
# LoRA trains far fewer weights: its usual learning rate is 10x full fine-tuning's. Each run is
# judged as soon as it is written: the searched one's table (before and after fine-tuning) comes
# a run's time earlier than the pair's
one searched-lora16 --factors experiments/results/extend-8x-cpu-factors.json --lora 16 --learning-rate 2e-4
judge lora-searched-lora16 yarn-cd searched-lora16
one yarn-cd-lora16 --method yarn-cd --lora 16 --learning-rate 2e-4
judge lora-yarn-cd-lora16 yarn-cd yarn-cd-lora16
joined lora lora-searched-lora16 lora-yarn-cd-lora16
full searched yarn-cd --factors experiments/results/extend-8x-cpu-factors.json
full yarn-cd yarn-cd --method yarn-cd
joined full full-searched full-yarn-cd
full pi pi,yarn-cd --method pi
joined all lora full-searched full-yarn-cd full-pi
