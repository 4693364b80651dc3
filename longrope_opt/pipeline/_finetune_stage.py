"""`extend --finetune`: the method's second half as a stage after export.

The candidate `extend` found (its searched winner) and the best formula (the validation's
reference row) are fine-tuned alike: the same documents in the same order, seed, steps and
schedule, PoSE to the target from samples of the trained length, mixed windows
(`finetune_and_export`). The two fine-tuned models are then validated against each other and
the rows measured before fine-tuning (at the target length, with passkeys; the rows measured
before come from the study's store), and inside the trained window against the base model (the
short context kept). Whichever the verdict ships after fine-tuning is what the load line names,
and, for a GGUF model, what ``finetuned.gguf`` holds: its trained weights.

Each run resumes from its Trainer checkpoints, a run whose model directory is written is not
trained again, and the validations' measurements are stored as they are made: a rerun after an
interruption repeats at most the steps since the last checkpoint.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from longrope_opt.data import PERL_DOC
from longrope_opt.evaluation import DEFAULT_MARGIN
from longrope_opt.models import export_gguf
from longrope_opt.models import gguf_source
from longrope_opt.models import load_model
from longrope_opt.pipeline._finetune import finetune_and_export
from longrope_opt.pipeline._finetune import formula_scaling
from longrope_opt.pipeline._report import write_report
from longrope_opt.pipeline._stages import Outcome
from longrope_opt.pipeline._stages import file_stamps
from longrope_opt.pipeline._stages import headline
from longrope_opt.pipeline._validate import validate_candidates
from longrope_opt.rope import RopeSpec
from longrope_opt.studies import record
from longrope_opt.studies import study_winner
from longrope_opt.training import SHORT_SHARE
from longrope_opt.training import default_learning_rate


logger = logging.getLogger(__name__)

#: The searched winner's fine-tuned model directory inside `extend`'s folder.
FINETUNED = "finetuned"


@dataclass
class FinetuneOutcome:
    """What the fine-tuning stage found and wrote.

    Attributes:
        verdict: The fine-tuned winner's verdict against the fine-tuned formula.
        headline: The verdict line after fine-tuning.
        load: The line that loads what to ship after fine-tuning.
        files: ``(what, path)`` of what it wrote, the one to use first.
        losses: Each run's per-step loss, by model directory name.
        short: Each fine-tuned model's perplexity ratio to the base model inside the trained
            window (the short context kept), by name.
        table: The validation table at the target length, as printed.
    """

    verdict: str = ""
    headline: str = ""
    load: str = ""
    files: list[tuple[str, str]] = field(default_factory=list)
    losses: dict[str, list[float]] = field(default_factory=dict)
    short: dict[str, float] = field(default_factory=dict)
    table: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (what the study records)."""
        return {"verdict": self.verdict, "headline": self.headline, "load": self.load,
                "files": [list(f) for f in self.files], "losses": self.losses,
                "short": self.short, "table": self.table}  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FinetuneOutcome:
        """The inverse of `to_dict`."""
        return cls(**{**data, "files": [tuple(f) for f in data.get("files", [])]})


@dataclass
class Finetune:
    """Fine-tune the winner and the reference formula alike, validate both, ship the better.

    `settings` are `finetune_and_export`'s training settings (``steps``, ``learning_rate``,
    ``warmup_steps``, ``grad_accum``, ``save_steps``, ...); PoSE's real tokens default to the
    trained length, the mixed windows' share to `SHORT_SHARE`.
    """

    out: Path
    outcome: Outcome
    settings: dict[str, Any]
    held_out: str
    docs: int
    keys: int
    classic: tuple[str, ...]
    corpus: str = PERL_DOC
    seed: int = 0
    margin: float = DEFAULT_MARGIN
    device: str = "auto"
    attn: str | None = None
    gguf: bool = False
    result: FinetuneOutcome = field(default_factory=FinetuneOutcome)
    name: str = "finetune"

    def run(self, search: Any) -> None:
        """Train what is not trained yet, validate, write the GGUF and the record."""
        length = search.config.target_length
        spec = RopeSpec.from_config(search.model.config)
        ref = self.outcome.reference
        runs: dict[str, dict[str, Any]] = {FINETUNED: {"factors": str(self.out / "factors.json")},
                f"{FINETUNED}-{ref}": {"method": ref}}  # fmt: skip
        for name, source in runs.items():
            self._train(search, self.out / name, source, spec.original_length)
        dirs = [str(self.out / name) for name in runs]
        common = dict(storage=search.study._storage, corpus=self.held_out, docs=self.docs,  # no public accessor
                      seed=self.seed, model=search.config.model, device=self.device,
                      attn=self.attn, margin=self.margin, progress=search.progress,
                      trained_length=search.config.trained_length, models=dirs,
                      passkey_form=search.config.passkey_form or "single")  # fmt: skip
        long = validate_candidates([search.study.study_name], lengths=[length],
                                   classic=self.classic, keys=self.keys,
                                   output=self.out / "validation-finetuned", **common)  # fmt: skip
        short = validate_candidates(lengths=[spec.original_length], classic=("none",), keys=0,
                                    output=self.out / "validation-short", **common)  # fmt: skip
        result = self.result
        result.table = long.table
        verdict, _ = long.summary.verdicts.get(FINETUNED, ("", ""))
        result.verdict = verdict
        # against the base model itself (the reference row may be a fine-tuned formula)
        stats = short.summary.stats[spec.original_length]
        result.short = {name: round(stats[name].ppl / stats["none"].ppl, 4) for name in runs}
        winner = study_winner(search.study)
        shipped, scaling = (FINETUNED, winner.scaling) if verdict == "dominates" else (
            f"{FINETUNED}-{ref}", formula_scaling(spec, length, ref))  # fmt: skip
        against = long.summary.reference[length]  # the fine-tuned formula, unless a row beat it
        result.headline = _headline(verdict, against, shipped, self.settings["steps"], result.short)
        folder = self.out / shipped
        result.load = f"AutoModelForCausalLM.from_pretrained({str(folder)!r})"
        result.files = [("fine-tuned, to ship: model directory", str(folder))]
        other = next(str(self.out / n) for n in runs if n != shipped)
        result.files.append(("the other fine-tuned model directory", other))
        if self.gguf and scaling is not None and scaling.n_hat == 0:
            result.files.append(self._gguf(search, folder, scaling, spec, length))
        result.files += [("validation after fine-tuning", str(self.out / "validation-finetuned.txt")),
                         ("short context against the base model", str(self.out / "validation-short.txt"))]  # fmt: skip
        for name in runs:
            meta = json.loads((self.out / name / "config.json").read_text())
            result.losses[name] = meta["longrope_opt"]["finetune"]["losses"]
        # the report leads with what to ship now; the export's sections follow
        write_report(self.out / "report.html", study=search.study, summary=self.outcome.summary,
                     table=self.outcome.table, verdict=headline(self.outcome),
                     shipped=self.outcome.files, finetuned=result)  # fmt: skip
        self._record(search)

    def _train(self, search: Any, folder: Path, source: dict[str, Any], trained: int) -> None:
        settings = {"pose_tokens": trained, "short_share": SHORT_SHARE, **self.settings}
        if _trained_alike(folder, settings, self.corpus, self.seed):
            logger.info("%s is trained: kept", folder)
            return
        finetune_and_export(folder, model=search.config.model, corpus=self.corpus,
                            target_length=search.config.target_length, seed=self.seed,
                            device=self.device, attn=self.attn, overwrite=True,
                            trained_length=search.config.trained_length, **source,
                            **settings)  # fmt: skip

    def _gguf(self, search: Any, folder: Path, scaling: Any, spec: RopeSpec,
              length: int) -> tuple[str, str]:  # fmt: skip
        """``finetuned.gguf``: the shipped fine-tuned weights in the model's GGUF layout."""
        path = self.out / "finetuned.gguf"
        path.unlink(missing_ok=True)  # rewritten whole, as everything in this folder
        (self.out / "Modelfile").unlink(missing_ok=True)  # it now names the fine-tuned GGUF
        trained, _ = load_model(str(folder), dtype="float32", device="cpu")
        export_gguf(gguf_source(search.config.model), path, scaling, spec=spec,
                    target_length=length, weights=trained)  # fmt: skip
        return ("the fine-tuned model to ship as a GGUF for llama.cpp / Ollama", str(path))

    def _record(self, search: Any) -> None:
        """Add this stage's outcome and files to what the study records as shipped, so that a
        rerun with nothing left to do reports it without loading a model."""
        shipped = record.read_shipped(search.study)
        if not shipped:
            return
        shipped["finetuned"] = self.result.to_dict()
        known = {where for _, where, _ in shipped["files"]}
        files = [(w, p) for w, p, _ in shipped["files"]] + [
            (w, p) for w, p in self.result.files if p not in known]  # fmt: skip
        # stamped again: the report was rewritten
        shipped["files"] = [[what, where, file_stamps(Path(where))] for what, where in files]
        record.write_shipped(search.study, shipped)


def _trained_alike(folder: Path, settings: dict[str, Any], corpus: str, seed: int) -> bool:
    """Whether `folder` holds a model fine-tuned with these settings (a rerun keeps it)."""
    try:
        meta = json.loads((folder / "config.json").read_text())["longrope_opt"]["finetune"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    lora = settings.get("lora")
    rate = settings.get("learning_rate") or default_learning_rate(lora)
    # (a model trained before its rate was recorded: None, the default of its kind)
    trained = meta.get("learning_rate") or default_learning_rate(meta.get("lora"))
    return (meta.get("steps") == settings.get("steps") and meta.get("corpus") == corpus
            and meta.get("seed") == seed and meta.get("pose_tokens") == settings.get("pose_tokens")
            and meta.get("short_share") == settings.get("short_share")
            and meta.get("lora") == lora and trained == rate)  # fmt: skip


def _headline(verdict: str, against: str, shipped: str, steps: int, short: dict[str, float]) -> str:
    """The verdict line after fine-tuning, with the short context kept."""
    kept = ", ".join(f"{name} {ratio:.3f}x" for name, ratio in short.items())
    window = f" (perplexity inside the trained window, to the base model's: {kept})" if kept else ""
    judged = "dominates" if verdict == "dominates" else f"is {verdict or 'not judged'} against"
    return (f"after fine-tuning alike ({steps} steps): the searched winner {judged} {against} — "
            f"ship {shipped}{window}.")  # fmt: skip
