"""λ curves as a plain SVG file: no plotting package needed (documentation builds, reports)."""

from __future__ import annotations

import math
from pathlib import Path


def lambda_curves_svg(
    curves: dict[str, list[float]],
    path: str | Path,
    *,
    critical: int | None = None,
    colors: dict[str, str] | None = None,
    width: int = 720,
    height: int = 360,
) -> Path:
    """Write λ_i against dimension pair i (log scale), one line per named curve, as SVG.

    Args:
        curves: ``{name: [λ_0, ...]}``, every list as long (e.g. `lambda_records`' curves).
        path: The file to write.
        critical: A dimension to mark with a dashed line (the critical dimension).
        colors: ``{name: CSS color}``; others are black. A name starting with "searched" is drawn
            thicker.
        width: Pixels.
        height: Pixels.

    Returns:
        The path written.
    """
    n = len(next(iter(curves.values())))
    top = max(2.0, max(max(v) for v in curves.values()))
    left, right, upper, lower = 60, 170, 20, 40
    w, h = width - left - right, height - upper - lower
    colors = colors or {}

    def x(i: float) -> float:
        return left + w * i / (n - 1)

    def y(v: float) -> float:
        return upper + h * (1 - math.log(v) / math.log(top))

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="12">',
             f'<rect width="{width}" height="{height}" fill="white"/>']  # fmt: skip
    for v in (1, 2, 4, 8, 16):
        if v <= top:
            parts.append(f'<line x1="{left}" x2="{left + w}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                         f'stroke="#ddd"/><text x="{left - 8}" y="{y(v) + 4:.1f}" '
                         f'text-anchor="end">{v}</text>')  # fmt: skip
    if critical is not None:
        parts.append(f'<line x1="{x(critical):.1f}" x2="{x(critical):.1f}" y1="{upper}" '
                     f'y2="{upper + h}" stroke="#999" stroke-dasharray="4 3"/><text '
                     f'x="{x(critical) + 4:.1f}" y="{upper + 12}" fill="#666">critical '
                     f'dimension {critical}</text>')  # fmt: skip
    for i in range(0, n, 4):
        parts.append(f'<text x="{x(i):.1f}" y="{upper + h + 16}" text-anchor="middle">{i}</text>')
    parts.append(f'<text x="{left + w / 2}" y="{height - 6}" text-anchor="middle">dimension '
                 f'pair i (high → low frequency)</text>')  # fmt: skip
    parts.append(f'<text x="14" y="{upper + h / 2}" transform="rotate(-90 14 {upper + h / 2})" '
                 f'text-anchor="middle">λ_i (log scale)</text>')  # fmt: skip
    for k, (name, values) in enumerate(curves.items()):
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
        color = colors.get(name, "#000")
        stroke = 3 if name.startswith("searched") else 1.6
        parts.append(f'<polyline points="{points}" fill="none" stroke="{color}" '
                     f'stroke-width="{stroke}"/>')  # fmt: skip
        ly = upper + 16 + 18 * k
        parts.append(f'<line x1="{left + w + 12}" x2="{left + w + 34}" y1="{ly}" y2="{ly}" '
                     f'stroke="{color}" stroke-width="{stroke}"/><text x="{left + w + 40}" '
                     f'y="{ly + 4}">{name}</text>')  # fmt: skip
    parts.append("</svg>")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(parts) + "\n")
    return out
