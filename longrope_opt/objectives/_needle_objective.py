"""`NeedlePerplexityObjective`: needle-driven perplexity as an Optuna objective (lower is better)."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
from typing import Any

import optuna
import torch

from longrope_opt.errors import InvalidArgumentError
from longrope_opt.objectives._base import Objective
from longrope_opt.objectives._needle import DEFAULT_DEPTHS
from longrope_opt.objectives._needle import needle_nll
from longrope_opt.objectives._needle import needle_prompts
from longrope_opt.objectives._needle import prompts_hash
from longrope_opt.objectives._perplexity import evaluate_perplexity
from longrope_opt.objectives._perplexity import layer_progress
from longrope_opt.objectives._perplexity import safe_exp
from longrope_opt.rope import RopeScaling
from longrope_opt.space import SearchSpace


MODES = ("full", "skip")


class NeedlePerplexityObjective(Objective):
    """Perplexity of the answer tokens of needle prompts (LongRoPE2's needle-driven perplexity).

    One prompt per (document, depth) (`longrope_opt.objectives.needle_prompts`), the same for
    every trial. Per prompt, the answer's mean NLL is reported (``trial.report``, step = prompt
    index: paired values, so ``optuna.pruners.WilcoxonPruner`` can stop a losing candidate); the
    value is exp(Σ answer NLL / Σ answer tokens). The answers retrieved greedily are counted in
    the ``needle_correct`` user attr. The prompts' description (count, depths, hash) is recorded
    in the study once (`study_record`); a study scored on other prompts is not continued.

    Args:
        model: A loaded RoPE causal LM.
        samples: Documents (`longrope_opt.data.load_samples`, which carry the tokenizer), each
            with at least `sample_length` tokens.
        space: The search space (its target length is the prompts' window).
        tokenizer: The model's tokenizer (default: ``samples.tokenizer``).
        depths: Needle depths in [0, 1], at least 4.
        mode: ``"full"`` (one forward of the whole window per prompt) or ``"skip"`` (three
            pieces, `skip_tokens` real tokens, positions spanning the window).
        skip_tokens: Real tokens per prompt in ``"skip"`` mode.
        seed: Chooses the numbers.
        progress: Progress bar over decoder layers.
    """

    value_name = "needle perplexity"

    def __init__(
        self,
        model: Any,
        samples: Sequence[torch.Tensor],
        *,
        space: SearchSpace,
        tokenizer: Any = None,
        depths: Sequence[float] = DEFAULT_DEPTHS,
        mode: str = "full",
        skip_tokens: int = 2048,
        seed: int = 0,
        progress: bool = False,
    ) -> None:
        self.validate(space.target_length, depths=depths, mode=mode, skip_tokens=skip_tokens)
        tokenizer = tokenizer if tokenizer is not None else getattr(samples, "tokenizer", None)
        if tokenizer is None:
            raise InvalidArgumentError(
                "`tokenizer` is required (or `samples` from `load_samples`, which carry it)."
            )
        super().__init__(model, samples, space=space, progress=progress)
        self.mode = mode
        self.prompts = needle_prompts(
            tokenizer,
            list(samples),
            space.target_length,
            depths=depths,
            skip_tokens=skip_tokens if mode == "skip" else None,
            seed=seed,
        )
        self.description = {
            "mode": mode,
            "prompts": len(self.prompts),
            "depths": [float(d) for d in depths],
            "needle_positions": [p.needle_position for p in self.prompts],
            "tokens_per_prompt": int(self.prompts[0].ids.numel()),
            "hash": prompts_hash(self.prompts),
        }

    @staticmethod
    def validate(
        target_length: int,
        *,
        depths: Sequence[float] = DEFAULT_DEPTHS,
        mode: str = "full",
        skip_tokens: int = 2048,
        seed: int = 0,
        **unknown: Any,
    ) -> None:
        """Check the options before any model loads.

        Raises:
            InvalidArgumentError: An unknown option, or a value outside its range.
        """
        if unknown:
            raise InvalidArgumentError(
                f"unknown needle-ppl option(s) {sorted(unknown)}; known: depths, mode, "
                "skip_tokens, seed."
            )
        if mode not in MODES:
            raise InvalidArgumentError(f"`mode` must be one of {list(MODES)}, got {mode!r}.")
        if len(depths) < 4 or any(not 0.0 <= float(d) <= 1.0 for d in depths):
            raise InvalidArgumentError(
                f"`depths` must be at least 4 numbers in [0, 1], got {list(depths)!r}."
            )
        if mode == "skip" and (
            isinstance(skip_tokens, bool)
            or not isinstance(skip_tokens, int)
            or not 64 <= skip_tokens <= target_length
        ):
            raise InvalidArgumentError(
                f"`skip_tokens` must be an integer in [64, `target_length` = {target_length}], "
                f"got {skip_tokens!r}."
            )

    @staticmethod
    def sample_length(
        target_length: int, *, mode: str = "full", skip_tokens: int = 2048, **_: Any
    ) -> int:
        """Tokens each document needs: the window, or `skip_tokens` in ``"skip"`` mode."""
        return int(skip_tokens) if mode == "skip" else int(target_length)

    def study_record(self) -> dict[str, Any]:
        """The prompts every trial is scored on (count, depths, positions, hash)."""
        return self.description

    def same_record(self, stored: Any) -> bool:
        """Values on other prompts are not comparable (nor paired for the pruner)."""
        return isinstance(stored, dict) and stored.get("hash") == self.description["hash"]

    def mismatch(self, stored: Any) -> str:
        """Which prompts the study was scored on, against these."""
        return (
            f"was scored on other needle prompts (hash {stored.get('hash')} vs "
            f"{self.description['hash']} now: another corpus, seed, length or release)"
        )

    def full_fidelity(self, samples: Any) -> Callable[[RopeScaling], float]:
        """Full-length perplexity of `samples` (needle perplexity is a proxy of it)."""
        return lambda scaling: evaluate_perplexity(self.model, samples, scaling).ppl

    def measure(self, trial: optuna.Trial, scaling: Any) -> float:
        """exp(Σ answer NLL / Σ answer tokens); each prompt's mean answer NLL reported."""
        nll_sum, tokens, correct, per_prompt, forwarded = 0.0, 0, 0, [], 0
        layers = len(self.prompts) if self.progress else 0
        with layer_progress(self.model, layers):
            for i, prompt in enumerate(self.prompts):
                nll, ok = needle_nll(self.model, prompt)
                a = prompt.answer_span[1] - prompt.answer_span[0]
                nll_sum, tokens, correct = nll_sum + nll, tokens + a, correct + int(ok)
                forwarded += int(prompt.ids.numel())
                per_prompt.append(round(nll / a, 6))
                trial.set_user_attr("needle_nll", per_prompt)
                trial.set_user_attr("needle_correct", correct)
                # the cost `compare` counts, as the perplexity objective records it: a pruned
                # trial still says what it spent
                trial.set_user_attr("evaluated_tokens", forwarded)
                self.report(trial, per_prompt[-1], i)
        return safe_exp(nll_sum / tokens)
