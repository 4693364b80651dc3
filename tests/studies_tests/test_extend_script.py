"""`studies/extend_4x_smollm2.py` end to end on a tiny model: search, re-rank, table, resume."""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import optuna
import pytest

from tests.conftest import write_tiny_corpus


ROOT = Path(__file__).resolve().parents[2]


def test_extend_script_runs_every_stage_and_resumes(tiny_model_dir, tmp_path) -> None:
    corpus = write_tiny_corpus(tmp_path / "corpus", n_docs=7, words=300)
    out = tmp_path / "x4"
    cmd = [
        sys.executable, str(ROOT / "studies" / "extend_4x_smollm2.py"), "--model", tiny_model_dir,
        "--corpus", corpus, "--target-length", "256", "--skip-tokens", "96", "--trials", "6",
        "--rerank", "2", "--held-out", "3", "--keys", "2", "--out", str(out), "--dtype", "float32",
        "--guard-keys", "2", "--studies", "new,plain,floor",
    ]  # fmt: skip
    first = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "best classic method" in first.stdout and "guard 4x-new: seed" in first.stdout
    table = out.with_suffix(".txt").read_text()
    assert "best classic method" in table and "passkey paired with" in table
    raw = json.loads(out.with_suffix(".json").read_text())
    assert {"none", "pi", "ntk", "yarn", "yarn-cd", "ntk-cd", "plain-search", "new-search",
            "floor-search"} <= set(raw)  # fmt: skip
    assert all(len(row["ppl"]) == 3 and len(row["passkey128"]) == 2 for row in raw.values())
    assert all(row["compute"]["ppl"] == "float32" for row in raw.values())  # the path that ran
    storage = f"sqlite:///{out}.db"
    new = optuna.load_study(study_name="4x-new", storage=storage)
    assert len(new.user_attrs["longrope_opt:rerank"]) == 2
    guarded = new.user_attrs["longrope_opt:passkey_guard"]  # the seed ran every key
    assert any(len(keys) == 2 for keys in guarded.values())
    assert new.user_attrs["longrope_opt:search_config"]["space"] == "critical"
    floor = optuna.load_study(study_name="4x-floor", storage=storage)
    assert floor.user_attrs["longrope_opt:search_config"]["critical_above"] == 0
    c0 = max(
        t.params["critical_dim"] for t in floor.trials if t.user_attrs.get("seed") == "yarn-cd"
    )
    assert all(t.params["critical_dim"] <= c0 for t in floor.trials)
    # held-out documents never reach a search
    held = set(new.user_attrs["longrope_opt:search_config"]["exclude_docs"])
    assert len(held) == 3 and not held & set(new.user_attrs["provenance"].get("doc_ids", []))
    # rerunning only reads: nothing is evaluated again
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "rerank" not in again.stdout and len(optuna.load_study(
        study_name="4x-new", storage=storage).trials) == len(new.trials)  # fmt: skip
    # more keys for one method: only its new keys run, the others' results are kept
    more = subprocess.run(cmd + ["--keys", "3", "--passkey-methods", "new-search",
                                 "--passkey-lengths", "target"], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    assert more.returncode == 0, more.stderr[-3000:]
    after = json.loads(out.with_suffix(".json").read_text())
    assert after["new-search"]["passkey128"] == raw["new-search"]["passkey128"]  # not asked
    assert len(after["new-search"]["passkey256"]) == 3 and after["pi"] == raw["pi"]
    assert after["new-search"]["compute"]["passkey256"] == {"0-1": "float32", "2-2": "float32"}
    # bench/retrieval_proxy.py reads this table's studies and results
    proxy = subprocess.run([
        sys.executable, str(ROOT / "bench" / "retrieval_proxy.py"), "--out", str(out), "--model",
        tiny_model_dir, "--corpus", corpus, "--target-length", "256", "--skip-tokens", "96",
        "--docs", "1", "--depths", "4", "--dtype", "float32", "--json", str(tmp_path / "p.json"),
    ], cwd=ROOT, capture_output=True, text=True, timeout=900)  # fmt: skip
    assert proxy.returncode == 0, proxy.stderr[-3000:]
    values = json.loads((tmp_path / "p.json").read_text())["answer_nll"]
    assert set(values) == set(raw) and all(len(v) == 4 for v in values.values())
    assert "new-search" in proxy.stdout and "vs yarn-cd" in proxy.stdout
    # bench/retrieval_intervention.py: a hybrid row on chosen prompts, resumable
    swap = [
        sys.executable, str(ROOT / "bench" / "retrieval_intervention.py"), "--out", str(out),
        "--model", tiny_model_dir, "--target-length", "256", "--dtype", "float32",
        "--hybrid", "h=yarn-cd:plain-search:0-2", "--prompts", "0,1",
        "--json", str(tmp_path / "swap.json"),
    ]  # fmt: skip
    done = subprocess.run(swap, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    entry = json.loads((tmp_path / "swap.json").read_text())["h"]
    assert sorted(entry["results"]) == ["0", "1"] and entry["band"] == [0, 2]
    assert "h prompt 1:" in done.stdout and "sign test" in (tmp_path / "swap.txt").read_text()
    again = subprocess.run(swap, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0 and "h prompt" not in again.stdout  # resumed: nothing re-run
    bad = subprocess.run(swap + ["--hybrid", "h=yarn-cd"], cwd=ROOT, capture_output=True,
                         text=True, timeout=900)  # fmt: skip
    assert bad.returncode == 2 and "--hybrid must look like name=base:donor:a-b" in bad.stderr
    bad = subprocess.run(swap + ["--hybrid", "h=yarn-cd:longrope:0-2"], cwd=ROOT,
                         capture_output=True, text=True, timeout=900)  # fmt: skip
    assert bad.returncode == 2 and "no scaled row 'longrope'" in bad.stderr
    # --perplexity rebuilds the table's held-out windows: a row's band from itself is the row
    same = swap[:-6] + ["--hybrid", "same=yarn-cd:yarn-cd:0-4", "--perplexity", "--corpus",
                        corpus, "--prompts", "0", "--json", str(tmp_path / "same.json")]  # fmt: skip
    done = subprocess.run(same, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    entry = json.loads((tmp_path / "same.json").read_text())["same"]
    assert entry["ppl_docs"] == raw["yarn-cd"]["docs"]
    assert np.allclose(entry["ppl"], raw["yarn-cd"]["ppl"], rtol=1e-5)
    assert "vs plain-search ×" not in done.stdout and "vs yarn-cd ×1.000" in done.stdout
    other = write_tiny_corpus(tmp_path / "other", n_docs=5, words=300, seed=7)
    for f in Path(other).glob("*.txt"):  # other documents, other ids
        f.rename(f.with_name(f"other-{f.name}"))
    bad = subprocess.run(same[:-2] + ["--corpus", other, "--json", str(tmp_path / "o.json")],
                         cwd=ROOT, capture_output=True, text=True, timeout=900)  # fmt: skip
    assert bad.returncode == 2 and "--perplexity: --corpus" in bad.stderr
    # bench/heldout_prose.py: the table's rows on other documents, one window each, resumable
    prose = [
        sys.executable, str(ROOT / "bench" / "heldout_prose.py"), "--out", str(out), "--model",
        tiny_model_dir, "--length", "256", "--dtype", "float32", "--corpus", other, "--docs", "3",
        "--methods", "new-search,yarn", "--json", str(tmp_path / "prose.json"),
    ]  # fmt: skip
    done = subprocess.run(prose, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "prose.json").read_text())
    assert list(result["rows"]) == ["yarn-cd", "new-search", "yarn"]  # the reference first
    assert all(sorted(row["ppl"]) == sorted(result["docs"]) for row in result["rows"].values())
    assert all(Path(d).name.startswith("other-") for d in result["docs"])  # not the table's
    assert done.stdout.count(".txt: ") == 9  # one line per (row, document) measured
    line = next(
        x for x in (tmp_path / "prose.txt").read_text().splitlines() if x.startswith("yarn-cd")
    )
    mean = math.exp(np.mean(np.log(list(result["rows"]["yarn-cd"]["ppl"].values()))))
    assert line.split()[1:4] == [f"{mean:.3f}", "1.000", "+0.0000"]  # itself: ratio 1
    again = subprocess.run(prose, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0 and ".txt: " not in again.stdout  # resumed: nothing re-run
    result["rows"]["yarn"]["identity"]["t"] += 1  # as if the row had changed since
    (tmp_path / "prose.json").write_text(json.dumps(result))
    again = subprocess.run(prose, cwd=ROOT, capture_output=True, text=True, timeout=900)
    measured = [x.split()[0] for x in again.stdout.splitlines() if ".txt: " in x]
    assert again.returncode == 0 and measured == ["yarn"] * 3  # that row only, every document
    more = subprocess.run(prose + ["--docs", "4"], cwd=ROOT, capture_output=True, text=True,
                          timeout=900)  # fmt: skip
    measured = [x.split()[:2] for x in more.stdout.splitlines() if ".txt: " in x]
    assert more.returncode == 0 and len({doc for _, doc in measured}) == 1  # only the new one
    assert [name for name, _ in measured] == ["yarn-cd", "new-search", "yarn"]
    first = Path(result["docs"][0])
    first.write_text(" ".join(reversed(first.read_text().split())))  # its text changes
    again = subprocess.run(prose + ["--docs", "4"], cwd=ROOT, capture_output=True, text=True,
                           timeout=900)  # fmt: skip
    measured = [x.split()[1] for x in again.stdout.splitlines() if ".txt: " in x]
    assert again.returncode == 0 and measured == [f"{first.name}:"] * 3
    for extra, message in ((["--docs", "1"], "--docs must be >= 2"),
                           (["--methods", "longrope"], "no row 'longrope'"),
                           (["--corpus", str(tmp_path / "nope")], "does not exist"),
                           (["--docs", "9"], "need k=9"),
                           (["--length", "128"], "not this run's"),
                           (["--length", "64"], "--length must be above the model's trained")):  # fmt: skip
        kept = (tmp_path / "prose.json").read_bytes()
        bad = subprocess.run(prose + extra, cwd=ROOT, capture_output=True, text=True, timeout=900)
        assert bad.returncode == 2 and message in bad.stderr, (extra, bad.stderr[-500:])
        assert (tmp_path / "prose.json").read_bytes() == kept  # another setting: nothing lost
        assert "Traceback" not in bad.stderr and bad.stderr.count("error:") == 1
    bad = subprocess.run(cmd + ["--passkey-methods", "longrope"], cwd=ROOT, capture_output=True,
                         text=True, timeout=900)  # fmt: skip
    assert bad.returncode == 2 and "--passkey-methods: unknown ['longrope']" in bad.stderr
    for script, extra, message in (
        (cmd, ["--dtype", "fp8"], "`dtype` must be one of"),
        (cmd, ["--corpus", str(tmp_path / "nope")], "does not exist"),
        (prose, ["--dtype", "fp8"], "`dtype` must be one of"),
        (prose, ["--out", str(tmp_path / "none")], "--out: no table at"),
        (cmd, ["--out", str(tmp_path / "no" / "x")], "does not exist; create it first"),
    ):  # a bad value reaching the library: one line and exit 2, not a traceback
        bad = subprocess.run(script + extra, cwd=ROOT, capture_output=True, text=True, timeout=900)
        assert bad.returncode == 2 and message in bad.stderr, (extra, bad.stderr[-500:])
        assert "Traceback" not in bad.stderr and bad.stderr.count("error:") == 1
    assert not (tmp_path / "none.db").exists()  # a wrong --out makes no empty study file
    bad = subprocess.run(cmd + ["--passkey-lengths", "quarter"], cwd=ROOT, capture_output=True,
                         text=True, timeout=900)  # fmt: skip
    assert bad.returncode == 2 and "--passkey-lengths must name half and/or target" in bad.stderr


def test_classic_stage_measures_the_chosen_rows_without_a_search(tiny_model_dir, tmp_path) -> None:
    corpus = write_tiny_corpus(tmp_path / "corpus", n_docs=4, words=300)
    out = tmp_path / "x8"
    cmd = [
        sys.executable, str(ROOT / "studies" / "extend_4x_smollm2.py"), "--model", tiny_model_dir,
        "--corpus", corpus, "--target-length", "256", "--held-out", "2", "--out", str(out),
        "--dtype", "float32", "--stage", "classic",
    ]  # fmt: skip
    first = subprocess.run(cmd + ["--methods", "none", "--keys", "0"], cwd=ROOT,
                           capture_output=True, text=True, timeout=900)  # fmt: skip
    assert first.returncode == 0, first.stderr[-3000:]
    assert "no classic row measured yet" in out.with_suffix(".txt").read_text()
    assert not out.with_suffix(".db").exists()  # no study: nothing was searched
    raw = json.loads(out.with_suffix(".json").read_text())
    assert set(raw) == {"none"} and len(raw["none"]["ppl"]) == 2
    assert all(not raw["none"].get(f"passkey{n}") for n in (128, 256))  # --keys 0: none ran
    more = subprocess.run(cmd + ["--methods", "yarn-cd,ntk", "--keys", "1",
                                 "--passkey-lengths", "target"], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    assert more.returncode == 0, more.stderr[-3000:]
    after = json.loads(out.with_suffix(".json").read_text())
    assert after["none"] == raw["none"]  # not asked: kept, not measured again
    assert set(after) == {"none", "yarn-cd", "ntk"}
    assert all(len(after[m]["passkey256"]) == 1 for m in ("yarn-cd", "ntk"))  # the rows asked
    assert "passkey256" not in after["none"]
    table = out.with_suffix(".txt").read_text()
    assert "best classic method" in table and "none" in table and "search" not in table
    for extra, message in ((["--methods", "longrope"], "--methods: unknown ['longrope']"),
                           (["--methods", "new-search"], "--methods: unknown ['new-search']"),
                           (["--keys", "-1"], "--keys must be an integer >= 0, got -1"),
                           (["--held-out", "0"], "--held-out must be an integer >= 1, got 0"),
                           (["--target-length", "64"], "above the model's trained length 64"),
                           (["--rerank", "0"], "--rerank must be an integer >= 1, got 0")):  # fmt: skip
        bad = subprocess.run(cmd + extra, cwd=ROOT, capture_output=True, text=True, timeout=900)
        assert bad.returncode == 2 and message in bad.stderr, (extra, bad.stderr[-500:])
        assert "Traceback" not in bad.stderr


def _script():
    # studies/ is not a package: load the script as a module to test its pieces.
    spec = importlib.util.spec_from_file_location(
        "extend_4x", ROOT / "studies" / "extend_4x_smollm2.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _guard_study(rerank: dict[str, float]) -> optuna.Study:
    study = optuna.create_study()
    for i, value in enumerate([5.5, 5.0, 4.9, 4.8, 4.7]):
        seed = {0: "ntk-cd", 1: "yarn-cd"}.get(i)
        attrs = {"seed": seed} if seed else {}
        study.add_trial(optuna.trial.create_trial(value=value, user_attrs=attrs))
    study.set_user_attr("longrope_opt:rerank", rerank)
    return study


def test_guard_keeps_the_best_candidate_that_retrieves_as_well_as_the_best_seed() -> None:
    script = _script()
    # trial 1 (best seed) misses key 2; trial 4 (re-rank best) misses keys 0 and 1; trial 3
    # misses key 3 only; trial 2 retrieves everything but ranks last.
    misses = {1: {2}, 4: {0, 1}, 3: {3}, 2: set()}
    calls: list[tuple[int, int]] = []

    def check(trial, i: int) -> bool:
        calls.append((trial.number, i))
        return i not in misses[trial.number]

    study = _guard_study({"4": 4.0, "3": 4.1, "2": 4.2})
    winner = script.guard(study, check, 4)
    assert winner.number == 3  # the best re-ranked trial with <= 1 miss, not the perfect one
    assert [n for n, _ in calls].count(4) == 2  # stopped once it missed more than the seed
    assert 2 not in {n for n, _ in calls}  # never reached
    assert study.user_attrs[script.GUARD_KEY] == {
        "1": [True, True, False, True], "4": [False, False], "3": [True, True, True, False],
    }  # fmt: skip
    calls.clear()
    assert script.guard(study, check, 4).number == 3 and not calls  # resumed: nothing re-run
    more = script.guard(study, check, 5)  # one more key: only key 4 runs, per trial still alive
    assert more.number == 3 and {i for _, i in calls} == {4}


def test_guard_falls_back_to_the_best_seed_when_no_candidate_retrieves_as_well() -> None:
    script = _script()
    study = _guard_study({"4": 4.0, "3": 4.1})
    winner = script.guard(study, lambda trial, i: trial.number == 1, 3)
    assert winner.number == 1 and winner.user_attrs["seed"] == "yarn-cd"


def test_sign_test_matches_an_exact_binomial_test() -> None:
    from scipy.stats import binomtest

    script = _script()
    for b, c in [(8, 1), (6, 0), (3, 3), (0, 5), (12, 4)]:
        assert math.isclose(script.stats.sign_test(b, c), binomtest(b, b + c, 0.5).pvalue)
    assert script.stats.sign_test(0, 0) == 1.0


def test_hybrid_takes_one_band_of_factors_from_the_donor_and_the_rest_from_the_base() -> None:
    from longrope_opt import RopeScaling

    spec = importlib.util.spec_from_file_location(
        "intervention", ROOT / "bench" / "retrieval_intervention.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    base = RopeScaling([1.0, 1.5, 2.0, 3.0, 4.0], 0, 1.1)
    donor = RopeScaling([1.0, 1.0, 1.0, 2.5, 5.0], 7, 1.3)
    assert bench.parse_hybrid("x=a:b:1-3") == ("x", "a", "b", 1, 3)
    hybrid = bench.hybrid_scaling(base, donor, 1, 3, "x")
    assert hybrid.factors.tolist() == [1.0, 1.0, 1.0, 3.0, 4.0]
    assert (hybrid.n_hat, hybrid.attention_scale) == (0, 1.1)  # the base's, not the donor's
    for text in ("x=a:b:3-1", "x=a:b", "a:b:0-2", "x=a:b:0-z"):
        with pytest.raises(argparse.ArgumentTypeError, match="--hybrid"):
            bench.parse_hybrid(text)


def test_prose_report_pairs_rows_on_shared_documents_only() -> None:
    spec = importlib.util.spec_from_file_location("prose", ROOT / "bench" / "heldout_prose.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = {"yarn-cd": {"ppl": {"a": 10.0, "b": 12.0, "c": 9.0}},
            "half": {"ppl": {"a": 9.0, "b": 10.8}}, "one": {"ppl": {"c": 9.9}},
            "none": {"ppl": {}}}  # fmt: skip
    table = {"yarn-cd": {"ppl": [10.0, 11.0]}, "half": {"ppl": [9.0, 9.9]}}
    lines = bench.report(rows, "yarn-cd", ["a", "b", "c"], table, _script()).splitlines()
    half, one, none = (
        next(x for x in lines if x.startswith(n + " ")) for n in ("half", "one", "none")
    )
    assert half.split()[2:4] == ["0.900", f"{math.log(0.9):+.4f}"]  # a and b only, both ×0.9
    assert "(2/3 documents)" in half and half.split()[-3] == "0.900"  # the 4x table's ratio
    assert "(1/3 documents)" in one and "[" not in one  # one document: no interval
    assert none.split()[1:] == ["not", "run"]


def test_table_report_pairs_every_row_with_the_best_classic_method() -> None:
    stats = _script().stats
    raw = {
        "pi": {"ppl": [20.0, 30.0], "passkey8": [False, False]},
        "yarn-cd": {"ppl": [10.0, 12.0], "passkey8": [True, True], "passkey16": [True, False, True]},
        "ntk": {"ppl": [11.0, 11.0]},  # lower on one window, higher in geometric mean
        "new-search": {"ppl": [9.0, 10.8], "passkey16": [False, True, False]},
        "trial-only": {"trial": 3},  # a search row not measured yet: not a table row
    }  # fmt: skip
    lines = stats.report(raw, 16, ["a", "b"]).splitlines()
    assert lines[0].endswith("best classic method: yarn-cd")
    row = {x.split()[0]: x for x in lines[2:6]}
    assert set(row) == {"pi", "yarn-cd", "ntk", "new-search"}
    assert row["new-search"].split()[2:4] == ["0.900", f"{math.log(0.9):+.4f}"]  # ×0.9 on both
    assert row["yarn-cd"].split()[2] == "1.000" and "not run" in row["ntk"]
    assert "2/2" in row["yarn-cd"] and "2/3" in row["yarn-cd"] and "1/3" in row["new-search"]
    paired = {x.split()[0]: x for x in lines[lines.index("") + 2 :]}
    # the same 3 prompts at 16: yarn-cd alone retrieves 0 and 2, new-search alone retrieves 1
    assert "3 keys +1  -2  p 1.000" in paired["new-search"]
    assert "2 keys +0  -2  p 0.500" in paired["pi"]


def test_table_report_gives_no_interval_over_one_window() -> None:
    stats = _script().stats
    raw = {"yarn-cd": {"ppl": [10.0]}, "new-carried": {"ppl": [9.0]}}
    lines = stats.report(raw, 16, ["a"]).splitlines()
    row = next(x for x in lines if x.startswith("new-carried"))
    assert row.split()[2] == "0.900" and "[" not in row and "—" in row
    two = stats.report({"yarn-cd": {"ppl": [10.0, 11.0]}, "new": {"ppl": [9.0, 10.0]}}, 16, ["a"])
    assert "[" in next(x for x in two.splitlines() if x.startswith("new "))


def test_a_rows_interval_does_not_depend_on_the_rows_reported_before_it() -> None:
    spec = importlib.util.spec_from_file_location("prose", ROOT / "bench" / "heldout_prose.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    docs = ["a", "b", "c", "d"]
    ref = {"ppl": {"a": 10.0, "b": 12.0, "c": 9.0, "d": 7.0}}
    late = {"ppl": {"a": 9.0, "b": 12.5, "c": 8.0, "d": 7.2}}
    early = {"ppl": {"a": 11.0, "b": 11.0, "c": 9.5, "d": 6.0}}

    def line(rows: dict, name: str) -> str:
        text = bench.report(rows, "ref", docs, {}, _script())
        return next(x for x in text.splitlines() if x.startswith(name + " "))

    alone = line({"ref": ref, "late": late}, "late")
    assert "[" in alone and alone == line({"ref": ref, "early": early, "late": late}, "late")
    stats = _script().stats
    raw = {"yarn-cd": {"ppl": [10.0, 12.0, 9.0]}, "late": {"ppl": [9.0, 12.5, 8.0]}}
    first = stats.report(raw, 16, ["a", "b", "c"]).splitlines()
    raw = {"yarn-cd": raw["yarn-cd"], "pi": {"ppl": [20.0, 21.0, 30.0]}, "late": raw["late"]}
    again = stats.report(raw, 16, ["a", "b", "c"]).splitlines()
    pick = lambda lines: next(x for x in lines if x.startswith("late "))  # noqa: E731
    assert pick(first) == pick(again)


def test_table_report_names_the_compute_paths_when_rows_mix_them() -> None:
    stats = _script().stats
    one = {"yarn-cd": {"ppl": [10.0], "compute": {"ppl": "float32"}},
           "new-carried": {"ppl": [9.0], "compute": {"ppl": "float32"}}}  # fmt: skip
    assert "compute path" not in stats.report(one, 16, ["a"])
    mixed = {**one, "ntk-cd": {"ppl": [11.0], "compute": {"ppl": "bf16-fp32attn"}},
             "pi": {"ppl": [30.0]}}  # fmt: skip
    line = next(x for x in stats.report(mixed, 16, ["a"]).splitlines() if "compute path" in x)
    assert "float32: yarn-cd, new-carried" in line and "bf16-fp32attn: ntk-cd" in line
    assert "not recorded: pi" in line
