"""A cheap model of the objective over the evaluated trials: what the evolution screens with.

Real evaluations cost minutes (a 32k forward on a CPU), the model costs a millisecond: so every
candidate slot of a generation draws many offspring and spends the real trial on the one the
model ranks best (surrogate-assisted evolution), and one slot per generation takes a step of the
model's own minimum inside a trust region around the best trial (model-based local search, as
NEWUOA/BOBYQA do), which is what moves a whole λ curve at once where one-gene mutations creep.

The model is a quadratic in x = ln λ with the couplings the landscapes have: every x_i and x_i²,
neighbouring x_i·x_{i+1}, and u = log2(1 + n̂), t with their squares. Ridge and a roughness
penalty across i (a frequency behaves like its neighbours) make it usable from a dozen trials
on, long before its 3·n + 5 coefficients are determined. Values are winsorized at the high end
(a collapsed candidate says "bad", not how bad) and standardized. NumPy only: samplers import
neither torch nor scipy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


Array = npt.NDArray[np.float64]

#: Ridge (on every coefficient but the intercept) and roughness across dimensions, on
#: standardized features and values.
RIDGE = 1e-3
ROUGH = 1.0
#: How many trials' worth the penalties may weigh (chosen per fit by leave-one-out error).
PRIORS = (0.3, 3.0, 30.0)


def isotonic(values: Array, weights: Array | None = None) -> Array:
    """The (weighted) least-squares non-decreasing fit: pool adjacent violators."""
    w = np.ones_like(values) if weights is None else weights
    means: list[float] = []
    sizes: list[float] = []
    counts: list[int] = []
    for v, wi in zip(values, w):
        means.append(float(v))
        sizes.append(float(wi))
        counts.append(1)
        while len(means) > 1 and means[-2] > means[-1]:
            m2, w2, c2 = means.pop(), sizes.pop(), counts.pop()
            means[-1] = (means[-1] * sizes[-1] + m2 * w2) / (sizes[-1] + w2)
            sizes[-1] += w2
            counts[-1] += c2
    return np.repeat(np.array(means), counts)


@dataclass(frozen=True)
class Features:
    """Which extra parameters the model sees besides ln λ."""

    n: int
    with_n_hat: bool
    with_t: bool

    def matrix(self, x: Array, u: Array | None, t: Array | None) -> Array:
        """Design matrix (m, p): 1, x, x², x_i·x_{i+1}, [u, u²], [t, t²]."""
        cols = [np.ones((x.shape[0], 1)), x, x**2, x[:, :-1] * x[:, 1:]]
        if self.with_n_hat:
            assert u is not None
            cols += [u[:, None], u[:, None] ** 2]
        if self.with_t:
            assert t is not None
            cols += [t[:, None], t[:, None] ** 2]
        return np.hstack(cols)

    @property
    def blocks(self) -> list[tuple[int, int]]:
        """Column ranges that run across dimensions (penalized for roughness)."""
        n = self.n
        return [(1, 1 + n), (1 + n, 1 + 2 * n), (1 + 2 * n, 3 * n)]


class QuadraticModel:
    """The ridge/roughness-penalized quadratic model of a study's values (see module doc)."""

    def __init__(self, features: Features, coef: Array, scale: tuple[Array, Array, float, float]):
        self.features = features
        self._coef = coef
        self._mu, self._sd, self._y_mu, self._y_sd = scale

    @classmethod
    def fit(cls, x: Array, u: Array | None, t: Array | None, y: Array) -> QuadraticModel | None:
        """Fit on trials (rows); None when fewer than 4 finite values or no spread."""
        finite = np.isfinite(y)
        if finite.sum() < 4:
            return None
        x, y = x[finite], y[finite]
        u = None if u is None else u[finite]
        t = None if t is None else t[finite]
        q1, q3 = np.percentile(y, [25, 75])
        y = np.minimum(y, q3 + 3.0 * max(q3 - q1, 1e-12))  # winsorize collapses
        features = Features(x.shape[1], u is not None, t is not None)
        a = features.matrix(x, u, t)
        mu, sd = a.mean(axis=0), a.std(axis=0)
        mu[0], sd[0] = 0.0, 1.0
        sd[sd < 1e-9] = 1.0
        y_mu, y_sd = float(y.mean()), float(y.std())
        if y_sd < 1e-12:
            return None
        z, b = (a - mu) / sd, (y - y_mu) / y_sd
        p = z.shape[1]
        penalty = RIDGE * np.eye(p)
        penalty[0, 0] = 0.0
        for lo, hi in features.blocks:
            k = hi - lo
            if k < 2:
                continue
            d = np.diff(np.eye(k), axis=0)
            penalty[lo:hi, lo:hi] += ROUGH * (d.T @ d)
        # the prior's weight chosen by leave-one-out error (closed form for ridge): strong where
        # the landscape is smooth across dimensions or the trials few, weak where each λ_i has
        # its own optimum
        gram, target = z.T @ z, z.T @ b
        best: tuple[float, Array] | None = None
        for weight in PRIORS:
            inverse = np.linalg.inv(gram + weight * penalty)
            coef = inverse @ target
            hat = np.sum((z @ inverse) * z, axis=1)  # diag(Z A⁻¹ Zᵀ)
            loo = (b - z @ coef) / np.maximum(1.0 - hat, 1e-6)
            error = float(np.mean(loo**2))
            if best is None or error < best[0]:
                best = (error, coef)
        assert best is not None
        return cls(features, best[1], (mu, sd, y_mu, y_sd))

    @property
    def spread(self) -> float:
        """The standard deviation of the values it was fitted on (the scale of a penalty)."""
        return self._y_sd

    def predict(self, x: Array, u: Array | None = None, t: Array | None = None) -> Array:
        """Predicted values of rows of x (with n̂'s u and t where the model has them)."""
        a = self.features.matrix(np.atleast_2d(x), _col(u, x), _col(t, x))
        return ((a - self._mu) / self._sd @ self._coef) * self._y_sd + self._y_mu

    def _gradient(self, x: Array, u: float, t: float) -> tuple[Array, float, float]:
        """d prediction / d (x, u, t) at one point."""
        w = self._coef / self._sd  # per raw feature
        n = self.features.n
        gx = w[1 : 1 + n] + 2.0 * w[1 + n : 1 + 2 * n] * x
        cross = w[1 + 2 * n : 3 * n]
        gx[:-1] += cross * x[1:]
        gx[1:] += cross * x[:-1]
        k = 3 * n
        gu = gt = 0.0
        if self.features.with_n_hat:
            gu, k = w[k] + 2.0 * w[k + 1] * u, k + 2
        if self.features.with_t:
            gt = w[k] + 2.0 * w[k + 1] * t
        return gx * self._y_sd, gu * self._y_sd, gt * self._y_sd

    def minimize(
        self,
        x0: Array,
        u0: float,
        t0: float,
        *,
        lower: Array,
        upper: Array,
        u_bounds: tuple[float, float],
        t_bounds: tuple[float, float],
        penalties: tuple[tuple[QuadraticModel, float], ...] = (),
        steps: int = 50,
    ) -> tuple[Array, float, float]:
        """The model's minimum over non-decreasing x in [lower, upper] (both non-decreasing) and
        u, t in their bounds, by projected gradient descent from (x0, u0, t0) with a
        backtracking step (the projection: isotonic fit, then clipping). Each ``(model c,
        weight)`` of `penalties` adds weight·max(0, c)² (a constraint's predicted violation)."""

        def value(x: Array, u: float, t: float) -> float:
            v = float(self.predict(x, np.array([u]), np.array([t]))[0])
            for c, w in penalties:
                v += w * max(0.0, float(c.predict(x, np.array([u]), np.array([t]))[0])) ** 2
            return v

        def gradient(x: Array, u: float, t: float) -> tuple[Array, float, float]:
            gx, gu, gt = self._gradient(x, u, t)
            for c, w in penalties:
                excess = float(c.predict(x, np.array([u]), np.array([t]))[0])
                if excess > 0:
                    cx, cu, ct = c._gradient(x, u, t)
                    gx, gu, gt = gx + 2 * w * excess * cx, gu + 2 * w * excess * cu, gt + 2 * w * excess * ct
            return gx, gu, gt

        x, u, t = x0.copy(), u0, t0
        step = 0.1
        best = value(x, u, t)
        for _ in range(steps):
            gx, gu, gt = gradient(x, u, t)
            norm = math.sqrt(float(gx @ gx) + gu * gu + gt * gt)
            if norm < 1e-10:
                break
            while step > 1e-6:
                nx = np.clip(isotonic(x - step * gx / norm), lower, upper)
                nu = min(max(u - step * gu / norm, u_bounds[0]), u_bounds[1])
                nt = min(max(t - step * gt / norm, t_bounds[0]), t_bounds[1])
                trial = value(nx, nu, nt)
                if trial < best - 1e-12:
                    x, u, t, best = nx, nu, nt, trial
                    step *= 1.5
                    break
                step *= 0.5
            else:
                break
        return x, u, t


def _col(values: Array | None, x: Array) -> Array | None:
    if values is None:
        return None
    return np.broadcast_to(np.asarray(values, dtype=np.float64), (np.atleast_2d(x).shape[0],))
