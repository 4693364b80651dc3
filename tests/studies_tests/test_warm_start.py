"""A warm start (progressive extension): a shorter extension's factors carried to the new length
and tried first, stored in the study so a resume or a worker needs no file."""

from __future__ import annotations

import json
import math

import numpy as np
import optuna
import pytest

from longrope_opt import RopeScaling
from longrope_opt import RopeSpec
from longrope_opt.cli import main
from longrope_opt.errors import InvalidArgumentError
from longrope_opt.space import SearchSpace
from longrope_opt.studies import WARM_KEY
from longrope_opt.studies import SearchConfig
from longrope_opt.studies import record
from longrope_opt.studies import warm_start_params


optuna.logging.set_verbosity(optuna.logging.WARNING)
SMOL = RopeSpec(head_dim=64, base=1e5, original_length=8192)
EVO = ["--population-size", "4", "--num-mutations", "2", "--num-crossovers", "2",
       "--num-parents", "2", "--dtype", "float32", "--no-fuse", "--samples", "1",
       "--n-hat", "0"]  # fmt: skip


def test_carried_by_ln_ratio_onto_the_grid_and_bounds() -> None:
    space8 = SearchSpace(SMOL, 65536, n_hat=(0,))
    ramp = np.linspace(1.0, 5.0, SMOL.n_factors)  # a 4x winner reaching the 4x cap 1.25·4
    params = warm_start_params(space8, record.base_record(RopeScaling(ramp, 0, 1.1), 32768))
    got = np.array([params[n] for n in space8.names])
    k = math.log(8) / math.log(4)
    np.testing.assert_allclose(got, space8.snap(ramp**k))
    assert got[0] == 1.0 and got[-1] == space8.high  # λ = 1 stays; 5^1.5 > 10 is clipped
    assert np.all(np.diff(got) >= 0)
    # PI at 4x is PI at 8x
    pi = warm_start_params(space8, record.base_record(RopeScaling(np.full(32, 4.0)), 32768))
    assert {pi[n] for n in space8.names} == {8.0}


def test_refused_where_lambda_is_relative_or_a_ramp() -> None:
    with pytest.raises(InvalidArgumentError, match="`warm_start` needs the full space"):
        SearchConfig(warm_start="a.json", base="b.json")
    with pytest.raises(InvalidArgumentError, match="`warm_start` needs the full space"):
        SearchConfig(warm_start="a.json", space="critical")
    with pytest.raises(InvalidArgumentError, match="`warm_start` must be"):
        SearchConfig(warm_start="")
    space = SearchSpace(SMOL, 32768, n_hat=(0,))
    with pytest.raises(InvalidArgumentError, match="must hold 32 factors .* got 8"):
        warm_start_params(space, record.base_record(RopeScaling(np.ones(8)), 16384))
    with pytest.raises(InvalidArgumentError, match="past the trained length 8192"):
        warm_start_params(space, record.base_record(RopeScaling(np.ones(32)), 8192))


def _search(model, corpus, storage, name, target, n, *extra) -> int:
    return main(["search", "--model", model, "--corpus", corpus, "--storage", storage,
                 "--study-name", name, "--target-length", str(target), "--n-trials", str(n),
                 *EVO, *extra])  # fmt: skip


def test_cli_search_tries_the_carried_winner_once_and_resumes_without_the_file(
    tiny_model_dir, tiny_corpus, tmp_path, capsys
) -> None:
    storage = f"sqlite:///{tmp_path / 's.db'}"
    assert _search(tiny_model_dir, tiny_corpus, storage, "s1", 128, 5) == 0
    factors = tmp_path / "s1.json"
    assert main(["export", "--storage", storage, "--study-name", "s1", "-o", str(factors)]) == 0
    assert _search(tiny_model_dir, tiny_corpus, storage, "s2", 256, 6, "--warm-start", str(factors)) == 0

    study = optuna.load_study(study_name="s2", storage=storage)
    warm = [t for t in study.trials if WARM_KEY in t.user_attrs]
    assert len(warm) == 1 and warm[0].user_attrs[WARM_KEY] == 128
    assert "seed" not in warm[0].user_attrs  # a candidate: the guard's bar stays a formula
    seeds = [t.number for t in study.trials if t.user_attrs.get("seed")]
    assert warm[0].number > max(seeds)  # tried right after the formula seeds
    config = SearchConfig.from_study(study)
    assert isinstance(config.warm_start, dict) and config.warm_start["length"] == 128
    exported = json.loads(factors.read_text())
    space = config.build_space(RopeSpec.from_config(_config(tiny_model_dir)))
    expected = warm_start_params(space, record.base_record(RopeScaling.from_dict(exported), 128))
    assert {n: warm[0].params[n] for n in space.names} == {n: expected[n] for n in space.names}

    factors.unlink()  # the study holds the record: resuming needs neither the file nor the flag
    assert _search(tiny_model_dir, tiny_corpus, storage, "s2", 256, 8) == 0
    # the same factors by another route are the same search
    assert _search(tiny_model_dir, tiny_corpus, storage, "s2", 256, 9, "--warm-start", "study:s1") == 0
    study = optuna.load_study(study_name="s2", storage=storage)
    assert sum(WARM_KEY in t.user_attrs for t in study.trials) == 1
    capsys.readouterr()

    # a missing file is one line naming the flag (exit 2), before any model loads
    assert _search(tiny_model_dir, tiny_corpus, storage, "s3", 256, 6, "--warm-start", str(factors)) == 2
    err = capsys.readouterr().err
    assert "`--warm-start` must be 'study:NAME' or a factor JSON file" in err
    assert _search(tiny_model_dir, tiny_corpus, storage, "s4", 256, 6, "--warm-start",
                   "study:s1", "--space", "critical") == 2  # fmt: skip
    assert "`--warm-start` needs the full space" in capsys.readouterr().err


def _config(model_dir: str):
    from longrope_opt.models import read_config

    return read_config(model_dir)
