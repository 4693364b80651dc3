"""The CPU fp32 references the device run compares CUDA against (resumable; ≈ 30 min on a 2-core Zen 3).

    python -m bench.device.cpu_reference           # fills bench/device/cpu_reference.json

Each case of `bench.device.cases` is measured once with the model in fp32 on the CPU and written
at once, so an interrupted run resumes at the next case. The file's first key names the command,
commit, CPU and date, like every result kept in bench/.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import time

from bench.device.cases import REFERENCE
from bench.device.cases import ROOT
from bench.device.cases import cases
from bench.device.cases import key
from bench.device.cases import measure


def main() -> int:
    from longrope_opt.models import cpu_features
    from longrope_opt.models import cpu_name
    from longrope_opt.models import load_model

    done = json.loads(REFERENCE.read_text()) if REFERENCE.is_file() else {}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    done.setdefault("made_by", f"python -m bench.device.cpu_reference -- commit {commit}, "
                    f"{cpu_name()} {cpu_features()}, {datetime.date.today()}")  # fmt: skip
    done.setdefault("results", {})
    model, tokenizer = load_model("smollm2-135m", device="cpu", dtype="float32", fuse=False)
    for kind, method, length in cases():
        name = key(kind, method, length)
        if name in done["results"]:
            continue
        start = time.perf_counter()
        done["results"][name] = measure(model, tokenizer, kind, method, length)
        print(f"{name}: {done['results'][name]} ({time.perf_counter() - start:.0f} s)", flush=True)
        REFERENCE.write_text(json.dumps(done, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
