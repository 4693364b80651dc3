"""Figures for searches and evaluations (plotly), and attaching them to a study for the dashboard.

Records (plain data) are read by `lambda_records`, `progress_records` and `length_records`;
figures are built from records only, so they can be made and tested anywhere.
"""

from __future__ import annotations

from typing import Any

from longrope_opt.viz._figures import lambda_curve_figure
from longrope_opt.viz._figures import length_figure
from longrope_opt.viz._figures import progress_figure
from longrope_opt.viz._losses import loss_curve_figure
from longrope_opt.viz._records import lambda_records
from longrope_opt.viz._records import length_records
from longrope_opt.viz._records import progress_records
from longrope_opt.viz._svg import lambda_curves_svg
from longrope_opt.viz._validation import validation_figure


#: Dashboard graph ids (stable, so re-attaching replaces instead of piling up). The progress
#: figure keeps the id of the per-generation figure it replaced, so reattaching to a study
#: made before replaces that one instead of showing both.
FIGURE_IDS = {"lambda": "longrope-lambda", "progress": "longrope-generations"}


def study_figures(study: Any) -> dict[str, Any]:
    """The figures a study supports: λ curve and progress (both need a completed trial)."""
    # the optional extras `plotly` and `optuna-dashboard`
    from optuna.trial import TrialState

    figures = {}
    if study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        figures["lambda"] = lambda_curve_figure(lambda_records(study))
        figures["progress"] = progress_figure(progress_records(study))
    return figures


def attach_figures(study: Any) -> list[str]:
    """Save the study's figures into its storage, where optuna-dashboard shows them.

    Returns:
        The names of the figures attached.
    """
    try:
        # the optional extras `plotly` and `optuna-dashboard`
        from optuna_dashboard import save_plotly_graph_object
    except ImportError:
        raise ImportError(
            "attaching figures needs optuna-dashboard: pip install 'longrope-opt[dashboard]'."
        ) from None
    figures = study_figures(study)
    for name, fig in figures.items():
        save_plotly_graph_object(study, fig, graph_object_id=FIGURE_IDS[name])
    return sorted(figures)


__all__ = [
    "FIGURE_IDS",
    "attach_figures",
    "lambda_curve_figure",
    "lambda_curves_svg",
    "lambda_records",
    "length_figure",
    "length_records",
    "loss_curve_figure",
    "progress_figure",
    "progress_records",
    "study_figures",
    "validation_figure",
]
