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
