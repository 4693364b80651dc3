"""A LongRoPE search as a script, with the public API: one `SearchConfig`, one `run_search`.

    python studies/search_smollm2.py                          # 16k, 12 trials
    python studies/search_smollm2.py 32768 200                # target length, total trials

Rerunning continues the study (all state is in it); `longrope-opt worker --storage
sqlite:///longrope-study.db --study-name smollm2-study` joins it from another process. The README
shows the same search built by hand from the sampler, the space and the objective.
"""

import sys

from longrope_opt.studies import SearchConfig
from longrope_opt.studies import run_search


target, total = (int(x) for x in (sys.argv[1:] or [16384, 12]))
config = SearchConfig(
    model="smollm2-135m",
    target_length=target,
    samples=3,  # prose and code of the built-in corpus, in turn; losers stop after one
    sampler_options=dict(population_size=8, num_mutations=4, num_crossovers=4, num_parents=4),
)
result = run_search(config, storage="sqlite:///longrope-study.db", study_name="smollm2-study",
                    n_trials=total)  # fmt: skip
study = result.study
for t in study.trials:
    if t.user_attrs.get("seed") and t.value is not None:
        print(f"seed {t.user_attrs['seed']:<5} perplexity {t.value:.4f}")
print(f"best       perplexity {study.best_value:.4f} (trial {study.best_trial.number})")
