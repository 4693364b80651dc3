"""Sphinx configuration: the documentation site of longrope-opt.

Build it (warnings are errors, broken cross-references included):
    sphinx-build -W --keep-going -n -b html docs docs/_build/html
The API reference is generated from the docstrings of the public names, the CLI reference from
the argparse parsers, and the λ-curve figure by the project's own RoPE functions.
"""

from __future__ import annotations

import json
from pathlib import Path


HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

project = "longrope-opt"
author = "the longrope-opt authors"
copyright = "2026, the longrope-opt authors"

extensions = [
    "myst_parser",  # pages in Markdown, as the README
    "sphinx.ext.autodoc",  # the API reference from docstrings
    "sphinx.ext.napoleon",  # Google-style docstrings
    "sphinxarg.ext",  # the CLI reference from the argparse parsers
]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]

autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}
autodoc_typehints = "description"
autodoc_member_order = "bysource"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True  # "Attributes:" as fields, not objects autodoc documents again
# Names docstrings mention that no page documents (third-party types): not broken references.
nitpick_ignore_regex = [
    (r"py:.*", r"(optuna|torch|numpy|np|transformers|collections|typing|pathlib|argparse)\..*"),
    (r"py:.*", r"(Any|Callable|Iterator|Sequence|Mapping|Collection|Path|NDArray|ndarray)"),
    (r"py:.*", r"(T|SamplerFactory|BaseDistribution|FrozenTrial|Study|Trial|Tensor)"),
    (r"py:.*", r"(nn\.Module|Module)"),  # torch's, as `nn` in the training wrapper
    (r"py:.*", r"longrope_opt\.registry\.T"),  # a type variable: not an object to document
]

html_theme = "furo"
html_title = "longrope-opt"
html_static_path = ["_static"]


def lambda_figure(path: Path) -> None:
    """SmolLM2-135M's RoPE extended 4x: PI, NTK, YaRN, YaRN-cd and the shipped searched winner
    (its factor file, `longrope-opt export`'s format), drawn by the project's own functions."""
    from longrope_opt import RopeSpec
    from longrope_opt.evaluation import classic_rows
    from longrope_opt.rope import critical_dimension
    from longrope_opt.viz import lambda_curves_svg

    spec = RopeSpec(head_dim=64, base=100000.0, original_length=8192)
    rows = {r.name: r.scaling for r in classic_rows(spec, 32768)}
    curves = {m: [float(x) for x in rows[m].factors] for m in ("pi", "ntk", "yarn", "yarn-cd")}
    winner = ROOT / "experiments" / "results" / "shipped-4x.json"
    if winner.is_file():
        curves["searched (shipped)"] = json.loads(winner.read_text())["factors"]
    colors = {"pi": "#7f7f7f", "ntk": "#1f77b4", "yarn": "#ff7f0e", "yarn-cd": "#2ca02c",
              "searched (shipped)": "#d62728"}  # fmt: skip
    lambda_curves_svg(curves, path, critical=critical_dimension(spec), colors=colors)


def public_target(app, env, node, contnode):  # noqa: ANN001, ANN201  (Sphinx's event)
    """Resolve a Python reference the way a reader means it, or leave it broken.

    Docstrings name errors and types briefly (``InvalidArgumentError``) and annotations name a
    class by where it is defined (``longrope_opt.objectives._passkey.PasskeyPrompt``); both mean
    the public object this site documents (``longrope_opt.errors.InvalidArgumentError``,
    ``longrope_opt.objectives.PasskeyPrompt``). A name that matches no documented public object,
    or more than one, stays a broken reference, which fails the build.
    """
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"]
    name = target.rsplit(".", 1)[-1]
    package = ".".join(p for p in target.split(".")[:-1] if not p.startswith("_"))
    domain = env.get_domain("py")
    found = [full for full in domain.objects if full.rsplit(".", 1)[-1] == name]
    if "." in target:  # a private path: the public object of the same name in its package
        found = [full for full in found if full == f"{package}.{name}"]
    if len(found) != 1:
        return None
    return domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], found[0],
                               node, contnode)  # fmt: skip


def setup(app):  # noqa: ANN001, ANN201  (Sphinx's hook)
    """Draw the λ figure before the pages are read; resolve short and private-path names."""
    lambda_figure(HERE / "_static" / "lambda-curves.svg")
    app.connect("missing-reference", public_target)
