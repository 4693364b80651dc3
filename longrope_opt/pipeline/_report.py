"""`report.html`: what `extend` shipped and why, readable offline in any browser.

One self-contained page (plotly's script is embedded once, so it opens with no network): the
verdict, the validation table, the validation figure and the λ curves of the study's seeds
and the winner it shipped; after `extend --finetune`, the verdict after fine-tuning, both runs'
loss curves and the validation of the fine-tuned models.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from longrope_opt.files import write_text_atomic
from longrope_opt.viz import lambda_curve_figure
from longrope_opt.viz import lambda_records
from longrope_opt.viz import loss_curve_figure
from longrope_opt.viz import validation_figure


def write_report(
    path: str | Path,
    *,
    study: Any,
    summary: Any,
    table: str,
    verdict: str,
    shipped: list[tuple[str, str]],
    finetuned: Any = None,
) -> Path:
    """Write the report page.

    Args:
        path: The file to write.
        study: The study (its λ curves).
        summary: The validation's `longrope_opt.evaluation.Summary`.
        table: The validation table as `format_summary` prints it.
        verdict: The headline (what the summary line says).
        shipped: ``(what, where)`` of every exported artifact, first the one to use.
        finetuned: The fine-tuning stage's `FinetuneOutcome` (None: no fine-tuning).
    """
    records = lambda_records(study)
    native = records.get("native")
    on_top = (f" (relative to the checkpoint's own {html.escape(native)} RoPE: λ = 1 is the model "
              "as loaded)") if native else ""  # fmt: skip
    figures = [
        # plotly's script goes with the first figure on the page (the loss curves lead, if any)
        validation_figure(summary.to_dict()).to_html(full_html=False,
                                                    include_plotlyjs=finetuned is None,
                                                    div_id="validation-figure"),
        lambda_curve_figure(records).to_html(full_html=False,
                                                            include_plotlyjs=False,
                                                            div_id="lambda-figure"),
    ]  # fmt: skip
    after = ""
    if finetuned is not None:  # the fine-tuned verdict leads: it is what to ship now
        curves = loss_curve_figure(finetuned.losses).to_html(
            full_html=False, include_plotlyjs=True, div_id="loss-figure")  # fmt: skip
        after = f"""<h2>After fine-tuning</h2>
<p id="finetuned-verdict">{html.escape(finetuned.headline)}</p>
<table id="finetuned-files">{_rows(finetuned.files)}</table>
<pre id="finetuned-table">{html.escape(finetuned.table)}</pre>
<h2>Fine-tuning loss</h2>
{curves}
<h2>Before fine-tuning</h2>"""
    rows = _rows(shipped)
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>longrope-opt extend: {html.escape(study.study_name)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1200px; }}
pre {{ background: #f6f6f6; padding: 1rem; overflow-x: auto; font-size: 12px; }}
#verdict {{ font-size: 1.3rem; padding: .8rem; border-left: 6px solid #2ca02c; }}
#verdict.warn {{ border-color: #d62728; }}
td {{ padding: .2rem .8rem; }}
</style></head><body>
<h1>Context extension: {html.escape(study.study_name)}</h1>
{after}
<p id="verdict" class="{'' if verdict.startswith('dominates') else 'warn'}">{html.escape(verdict)}</p>
<h2>What was written</h2>
<table id="shipped">{rows}</table>
<h2>Validation on held-out documents</h2>
<pre id="table">{html.escape(table)}</pre>
<h2>Validation figure</h2>
{figures[0]}
<h2>Rescale factors λ: the study's seeds and the shipped winner{on_top}</h2>
{figures[1]}
</body></html>
"""
    out = Path(path)
    write_text_atomic(out, page)
    return out


def _rows(files: list[tuple[str, str]]) -> str:
    return "".join(
        f"<tr><td>{html.escape(what)}</td><td><code>{html.escape(where)}</code></td></tr>"
        for what, where in files
    )
