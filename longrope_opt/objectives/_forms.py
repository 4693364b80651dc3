"""The passkey forms: how a row's passkey prompts are measured (no torch: configs check them)."""

from __future__ import annotations

from longrope_opt.errors import InvalidArgumentError


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
