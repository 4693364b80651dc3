"""The passkey forms: how a row's passkey prompts are measured (no torch: configs check them)."""

from __future__ import annotations

from longrope_opt.errors import InvalidArgumentError


#: Filler tokens before the question that the branched form runs with the key in view
#: (`passkey_results`); too few and SmolLM2 misses keys the single-key prompt finds
#: (docs/results.md measures 64 to 2048).
LEAD_IN = 2048

#: ``"single"``: each prompt as the paper's single-key prompt, exactly. ``"branched"``: the
#: haystack once, each key and question grafted onto it (`passkey_results`): one forward for
#: any number of keys, on the CPU.
PASSKEY_FORMS = ("single", "branched")


def check_passkey_form(form: str) -> str:
    """`form` if it is one of `PASSKEY_FORMS`.

    Raises:
        InvalidArgumentError: It is not.
    """
    if form not in PASSKEY_FORMS:
        raise InvalidArgumentError(
            f"`passkey_form` must be one of {list(PASSKEY_FORMS)}, got {form!r}."
        )
    return form


def passkey_kind(form: str, lead_in: int = LEAD_IN) -> str:
    """The measurement kind a passkey outcome is stored under (`MeasurementStore`): the single
    form's is ``"passkey"``; a branched outcome names its lead-in, so a record made with
    another lead-in is never read as this one's."""
    check_passkey_form(form)
    return "passkey" if form == "single" else f"passkey-{form}-{lead_in}"
