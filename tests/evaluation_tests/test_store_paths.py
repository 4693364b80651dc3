"""Measurements made two ways are kept apart: a fused record never overwrites an eager one."""

from __future__ import annotations

from longrope_opt.evaluation import MeasurementStore
from longrope_opt.evaluation import measurement_path
from longrope_opt.patching import fuse_elementwise
from longrope_opt.patching import unfuse_elementwise
from tests.conftest import build_tiny_model


def test_the_path_names_the_compute_path_and_whether_the_model_is_fused() -> None:
    model = build_tiny_model("llama")
    assert measurement_path(model, "float32") == "float32"  # built here: no path recorded on it
    model.longrope_opt_compute = {"path": "bf16-fp32attn", "source": "forced"}
    assert measurement_path(model, "float32") == "bf16-fp32attn"
    fuse_elementwise(model)  # wraps the forwards; nothing compiles until a forward runs
    assert measurement_path(model, "float32") == "bf16-fp32attn-fused"
    unfuse_elementwise(model)
    assert measurement_path(model, "float32") == "bf16-fp32attn"


def test_two_processes_measuring_one_cell_two_ways_keep_both_records(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    eager = MeasurementStore(url, path="bfloat16")
    fused = MeasurementStore(url, path="bfloat16-fused")  # opened before either wrote
    eager.put("ppl:cell", {"nll": 10.0, "tokens": 4})
    fused.put("ppl:cell", {"nll": 10.01, "tokens": 4})  # the later write keeps the earlier one
    again = MeasurementStore(url, path="bfloat16")
    assert again.get("ppl:cell") == ({"nll": 10.0, "tokens": 4}, "bfloat16")
    assert MeasurementStore(url, path="bfloat16-fused").get("ppl:cell")[1] == "bfloat16-fused"
    # a path with no record of its own takes another's (the table names it) unless told not to
    other = MeasurementStore(url, path="float32").get("ppl:cell")
    assert other is not None and other[1] in {"bfloat16", "bfloat16-fused"}
    assert MeasurementStore(url, path="float32", reuse_other_paths=False).get("ppl:cell") is None


def test_a_fused_model_keeps_perplexity_fused_and_branched_passkeys_eager(tmp_path) -> None:
    """The branched form runs eager on a fused model (`shared_prefix` unfuses): its outcomes are
    stored under the eager path, and a table made the way this run makes them names no mix."""
    import optuna

    from longrope_opt.data import load_samples
    from longrope_opt.evaluation import STORE_STUDY
    from longrope_opt.evaluation import format_summary
    from longrope_opt.evaluation import summarize
    from longrope_opt.evaluation import validate
    from longrope_opt.models import load_model
    from longrope_opt.patching import set_attention
    from tests.conftest import save_tiny_model_dir
    from tests.conftest import write_tiny_corpus

    model_dir = save_tiny_model_dir(tmp_path / "model")
    corpus = write_tiny_corpus(tmp_path / "corpus", n_docs=2, words=600)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    model, tok = load_model(model_dir, dtype="float32")
    set_attention(model, "sdpa")  # the branched form needs SDPA on the CPU
    docs = load_samples(corpus, tok, 256, 1)
    kw = dict(lengths=[256], keys=2, classic=["yarn"], passkey_form="branched", progress=False)
    fuse_elementwise(model)
    fused = validate(model, tok, [], docs, store=MeasurementStore(url, path="float32-fused"), **kw)
    assert fused.measured > 0 and "compute paths" not in format_summary(summarize(fused))
    records = optuna.load_study(study_name=STORE_STUDY, storage=url).user_attrs
    paths = {key.split(":")[0].split("-")[0]: set(by_path) for key, by_path in records.items()}
    assert paths == {"ppl": {"float32-fused"}, "passkey": {"float32"}}
    unfuse_elementwise(model)
    eager = validate(model, tok, [], docs, store=MeasurementStore(url, path="float32"), **kw)
    assert eager.measured == 0 and eager.passkey == fused.passkey  # perplexity reused: named
    assert "from the store: yarn float32+float32-fused" in format_summary(summarize(eager))
