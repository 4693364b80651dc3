"""The stages `extend` runs after the search's own: validate on held-out text, then export.

Both read and write only what the study's storage keeps (the measurements are stored as they are
made, `longrope_opt.evaluation.MeasurementStore`), and the files they write are rewritten whole
from it, so a rerun after an interruption measures nothing twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from optuna.trial import TrialState

from longrope_opt.data import load_samples
from longrope_opt.errors import DataError
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.evaluation import DEFAULT_MARGIN
from longrope_opt.evaluation import MeasurementStore
from longrope_opt.evaluation import format_summary
from longrope_opt.evaluation import measurement_path
from longrope_opt.evaluation import study_rows
from longrope_opt.evaluation import summarize
from longrope_opt.evaluation import summary_csv
from longrope_opt.evaluation import summary_json
from longrope_opt.evaluation import validate
from longrope_opt.files import write_text_atomic
from longrope_opt.models import export_gguf
from longrope_opt.models import export_model
from longrope_opt.models import gguf_source
from longrope_opt.models import rope_parameters
from longrope_opt.pipeline._finetune import formula_scaling
from longrope_opt.pipeline._report import write_report
from longrope_opt.rope import RopeSpec
from longrope_opt.studies import Search
from longrope_opt.studies import export_best
from longrope_opt.studies import record
from longrope_opt.studies import study_documents
from longrope_opt.studies import study_winner


@dataclass
class Outcome:
    """What the validate and export stages found and wrote (filled as they run).

    Attributes:
        summary: The validation's `Summary`.
        table: The table as printed.
        verdict: The winner's verdict against the reference row.
        reference: The reference (best measured classic) row's name.
        files: ``(what, path)`` of everything written, the one to use first.
        seed: The seed's name when the shipped winner is a seed trial (no searched candidate
            beat it), else "".
        why: The verdict's reason (ratios, passkeys, documents that would settle it).
    """

    summary: Any = None
    table: str = ""
    verdict: str = ""
    reference: str = ""
    files: list[tuple[str, str]] = field(default_factory=list)
    seed: str = ""
    why: str = ""


def held_out_documents(
    search: Search, source: str, k: int, seed: int, *, param: str = "held_out"
) -> Any:
    """`k` documents of `source` that no stage of the search reads (its fitness documents,
    its re-rank's), at the target length.

    Raises:
        InvalidArgumentError: Too few remain (one line naming `param`).
    """
    length = search.config.target_length
    try:
        return load_samples(source, search.tokenizer, length, k, seed,
                            exclude=study_documents(search.study))  # fmt: skip
    except DataError as exc:
        raise InvalidArgumentError(
            f"`{param}` {source!r} has too few documents of >= {length} tokens that the search "
            f"does not read: need {k}. {exc} Name other text with `{param}`."
        ) from None


@dataclass
class Validate:
    """The study's winners against the classic rows on held-out documents and passkeys."""

    held_out: str
    docs: int
    keys: int
    classic: tuple[str, ...]
    out: Path
    outcome: Outcome
    seed: int = 0
    margin: float = DEFAULT_MARGIN
    name: str = "validate"

    def run(self, search: Search) -> None:
        """Measure what the store lacks, then write the table (`validation.txt`, .csv, .json)."""
        model, length = search.model, search.config.target_length
        docs = held_out_documents(search, self.held_out, self.docs, self.seed)
        store = MeasurementStore(search.study._storage,  # no public accessor
                                 path=measurement_path(model, "unknown"))  # fmt: skip
        validation = validate(model, search.tokenizer, study_rows(search.study), docs,
                              lengths=[length], store=store, keys=self.keys,
                              doc_ids=docs.doc_ids, classic=self.classic,
                              progress=search.progress,
                              passkey_form=search.config.passkey_form or "single")  # fmt: skip
        summary = summarize(validation, margin=self.margin)
        self.outcome.summary, self.outcome.table = summary, format_summary(summary)
        self.outcome.reference = summary.reference[length]
        # the shipped winner's row: `study_rows` names a trial by the first rule that chose it,
        # and the exported rule is always that one (guarded, else re-ranked, else best)
        winner = study_winner(search.study)
        verdict, why = summary.verdicts[f"{search.study.study_name}:{winner.rule}"]
        self.outcome.verdict, self.outcome.why = verdict, why
        self.outcome.seed = str(winner.trial.user_attrs.get("seed") or "")
        self.out.mkdir(parents=True, exist_ok=True)
        for suffix, text in ((".txt", self.outcome.table + "\n"), (".csv", summary_csv(summary)),
                             (".json", summary_json(summary))):  # fmt: skip
            write_text_atomic(self.out / f"validation{suffix}", text)


@dataclass
class Export:
    """The winner as a model directory and factors; the reference classic row too when the
    winner does not dominate it; the report. `context` (held-out text, seed, margin) is recorded
    with what was written (`record.SHIPPED`)."""

    out: Path
    outcome: Outcome
    context: dict[str, Any] = field(default_factory=dict)
    gguf: bool = False
    name: str = "export"

    def run(self, search: Search) -> None:
        """Write the model directories, the factor files and the report."""
        study, model, length = search.study, search.model, search.config.target_length
        winner = study_winner(study)
        self.out.mkdir(parents=True, exist_ok=True)
        factors = self.out / "factors.json"
        export_best(study, factors)
        meta = {"study": study.study_name, "trial": winner.trial.number, "rule": winner.rule}
        model_dir = export_model(model, search.tokenizer, self.out / "model", winner.scaling,
                                 target_length=length, metadata=meta, overwrite=True)  # fmt: skip
        what = (f"the {self.outcome.seed} seed (the study's best: no searched candidate beat it)"
                if self.outcome.seed else "the searched winner")  # fmt: skip
        searched = [(f"{what}: model directory", str(model_dir)),
                    ("its factors", str(factors))]  # fmt: skip
        classic: list[tuple[str, str]] = []
        if self.outcome.verdict != "dominates" and self.outcome.reference:
            ref = self.outcome.reference
            spec = RopeSpec.from_config(model.config)
            scaling = formula_scaling(spec, length, ref)
            assert scaling is not None  # "none" (no scaling) is never the best row past the window
            path = self.out / f"factors-{ref}.json"
            write_text_atomic(path, json.dumps({
                **scaling.to_dict(), "method": ref, "target_length": length,
                "rope_parameters": rope_parameters(scaling, spec, length),
                "provenance": record.read_provenance(study),
            }, indent=2) + "\n")  # fmt: skip
            ref_dir = export_model(model, search.tokenizer, self.out / f"model-{ref}", scaling,
                                   target_length=length, metadata={"method": ref},
                                   overwrite=True)  # fmt: skip
            classic = [(f"{ref} (the reference row): model directory", str(ref_dir)),
                       (f"{ref}'s factors", str(path))]  # fmt: skip
            if self.gguf:  # the GGUF holds what the verdict ships: the formula
                classic.append(self._gguf(search, scaling, ref))
        elif self.gguf:
            searched.append(self._gguf(search, winner.scaling, "the searched winner"))
        self.outcome.files = classic + searched if classic else searched
        report = write_report(self.out / "report.html", study=study, summary=self.outcome.summary,
                              table=self.outcome.table, verdict=headline(self.outcome),
                              shipped=self.outcome.files)  # fmt: skip
        self.outcome.files.append(("the report", str(report)))
        self.outcome.files.append(("the validation table", str(self.out / "validation.txt")))
        record.write_shipped(study, {
            "out": str(self.out.resolve()), "context": self.context,
            "trials": finished_count(study), "verdict": self.outcome.verdict,
            "reference": self.outcome.reference, "seed": self.outcome.seed,
            "why": self.outcome.why, "headline": headline(self.outcome),
            "files": [[what, where, file_stamps(Path(where))] for what, where in self.outcome.files],
        })  # fmt: skip


    def _gguf(self, search: Search, scaling: Any, what: str) -> tuple[str, str]:
        """What the verdict ships (`what`: the winner, or the reference formula) as
        ``model.gguf``, a copy of the model's GGUF (`export_gguf`)."""
        path = self.out / "model.gguf"
        path.unlink(missing_ok=True)  # this folder's own output, rewritten whole like the rest
        (self.out / "Modelfile").unlink(missing_ok=True)
        spec = RopeSpec.from_config(search.model.config)
        if scaling.n_hat > 0:
            return ("GGUF: not written", f"the winner keeps n_hat={scaling.n_hat}, which GGUF "
                    "cannot hold (`longrope-opt export --gguf ... --drop-n-hat` writes it without)")  # fmt: skip
        done = export_gguf(gguf_source(search.config.model), path, scaling, spec=spec,
                           target_length=search.config.target_length)  # fmt: skip
        return (f"{what} as a GGUF for llama.cpp / Ollama (Modelfile beside it)", str(done.path))


def finished_count(study: Any) -> int:
    """Finished (complete or pruned) trials of a study."""
    return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))


def file_stamps(path: Path) -> list[list[Any]]:
    """``[relative name, size, mtime_ns]`` of a file, or of every file in a folder: what a
    rerun compares to know the files are still the ones written."""
    if not path.exists():
        return []
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return [[str(p.relative_to(path)) if p != path else "", p.stat().st_size, p.stat().st_mtime_ns]
            for p in files]  # fmt: skip


def headline(outcome: Outcome) -> str:
    """The verdict line: the winner against the reference, and what to use."""
    ref, what = outcome.reference, "the searched winner"
    if outcome.seed:  # name a seed as the seed it is
        what = f"the study's best, the {outcome.seed} seed (no searched candidate beat it),"
    if outcome.verdict == "dominates":
        return f"dominates {ref}: {what} is better on held-out text by more than the margin."
    if outcome.verdict.endswith("equivalent"):
        return (f"{outcome.verdict} to {ref}: {what} is within the margin of the formula on "
                f"held-out text — ship {ref} (simpler, nothing to carry); it is exported — use "
                "it.")  # fmt: skip
    settle = next((p for p in outcome.why.split("; ") if p.startswith(("to settle", "no number"))),
                  "")  # fmt: skip
    more = f" ({settle})" if settle else ""
    return (f"{outcome.verdict} (against {ref}): {what} does not beat the formula on held-out "
            f"text{more}; {ref} is exported too — use it.")  # fmt: skip
