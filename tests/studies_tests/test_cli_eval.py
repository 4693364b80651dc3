"""`longrope-opt eval` on a tiny model saved to disk."""

from __future__ import annotations

import pytest

from longrope_opt.cli import main


def _base(model: str, corpus: str) -> list[str]:
    return ["eval", "--model", model, "--corpus", corpus]


def test_eval_prints_a_table_per_method_and_length(tiny_model_dir, tiny_corpus, capsys) -> None:
    args = [
        *_base(tiny_model_dir, tiny_corpus),
        "--lengths",
        "64,256",
        "--methods",
        "none,pi,yarn,yarn-cd",
        "--samples",
        "2",
        "--dtype",
        "float32",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    table = out[out.index("method") :].splitlines()
    assert table[0].split() == ["method", "64", "256"]
    rows = {line.split()[0]: [float(x) for x in line.split()[1:]] for line in table[2:6]}
    assert set(rows) == {"none", "pi", "yarn", "yarn-cd"}
    # at the trained length every method is the unscaled model
    assert rows["none"][0] == rows["pi"][0] == rows["yarn"][0] == rows["yarn-cd"][0]
    assert rows["pi"][1] != rows["none"][1]
    assert rows["yarn-cd"][1] != rows["yarn"][1]  # the critical-dimension row is its own


def test_eval_writes_csv_json_and_html(tiny_model_dir, tiny_corpus, tmp_path, capsys) -> None:
    import csv
    import json

    prefix = tmp_path / "table"
    args = [
        *_base(tiny_model_dir, tiny_corpus),
        "--lengths", "128,256", "--methods", "none,ntk,dynamic_ntk", "--samples", "1",
        "--dtype", "float32", "--no-fuse", "--output", str(prefix),
    ]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    table = out[out.index("method") :].splitlines()
    printed = {line.split()[0]: [float(x) for x in line.split()[1:]] for line in table[2:5]}
    with open(f"{prefix}.csv") as f:
        rows = list(csv.DictReader(f))
    assert {(r["method"], int(r["length"])) for r in rows} == {
        (m, n) for m in ("none", "ntk", "dynamic_ntk") for n in (128, 256)
    }
    for r in rows:  # the files hold the printed numbers
        col = 0 if r["length"] == "128" else 1
        assert float(r["ppl"]) == pytest.approx(printed[r["method"]][col], abs=1e-3)
    data = json.loads((tmp_path / "table.json").read_text())
    assert data["task"] == "perplexity" and len(data["rows"]) == 6
    html = (tmp_path / "table.html").read_text()
    assert "dynamic_ntk" in html and "Plotly" in html


def test_eval_passkey_table(tiny_model_dir, capsys) -> None:
    args = [
        "eval", "--model", tiny_model_dir, "--task", "passkey", "--lengths", "160",
        "--methods", "none,yarn", "--trials", "3", "--dtype", "float32", "--no-fuse",
    ]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "passkey accuracy (3 keys per length" in out
    table = out[out.index("method") :].splitlines()
    assert table[0].split() == ["method", "160"]
    for line in table[2:4]:
        assert line.split()[1].endswith("%")
    assert main([*args, "--trials", "0"]) == 2
    assert "`--trials` must be >= 1, got 0" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--methods", "none,foo"], "`--methods` entries must be in"),
        (["--lengths", "12x"], "`--lengths` must be a comma-separated list of integers"),
        (["--samples", "0"], "`--samples` must be >= 1, got 0"),
        (
            ["--mode", "sliding", "--lengths", "128"],
            "`--stride` must be an integer >= 1 with `--mode` sliding",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2(tiny_model_dir, tiny_corpus, capsys, extra, message) -> None:
    assert (
        main(
            [
                *_base(tiny_model_dir, tiny_corpus),
                "--dtype",
                "float32",
                *extra,
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 or err[-1].startswith("longrope-opt eval: error:")
    assert message in err[-1]


def _write(path, data) -> str:
    import json

    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def test_eval_with_searched_factors_file(tiny_model_dir, tiny_corpus, tmp_path, capsys) -> None:
    factors = _write(
        tmp_path / "f.json",
        {"factors": [1.0, 1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0], "n_hat": 2, "attention_scale": 1.1},
    )
    args = [
        *_base(tiny_model_dir, tiny_corpus),
        "--lengths",
        "256",
        "--methods",
        "none",
        "--factors",
        factors,
        "--samples",
        "2",
        "--dtype",
        "float32",
        "--no-fuse",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    rows = {
        line.split()[0]: float(line.split()[1])
        for line in out[out.index("method") :].splitlines()[2:4]
    }
    assert set(rows) == {"none", "searched"} and rows["none"] != rows["searched"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            {"factors": [1.0, 2.0, 3.0]},
            "searched factors do not fit this model: `--factors` must have length rotary_dim // 2 = 8",
        ),
        (
            {"factors": [1.0, 2.0, 1.5, 3.0, 3.0, 3.0, 3.0, 3.0]},
            "`--factors` must be non-decreasing; first violation at index 2: 2.0 > 1.5",
        ),
        ({"factors": [1.0, -2.0]}, "`--factors` must be finite and > 0; got -2.0 at index 1"),
        ("{not json", "is not JSON"),
        ({"n_hat": 3}, "`--factors` is missing"),
    ],
)
def test_bad_factor_files(tiny_model_dir, tiny_corpus, tmp_path, capsys, content, message) -> None:
    factors = _write(tmp_path / "bad.json", content)
    args = [
        *_base(tiny_model_dir, tiny_corpus),
        "--lengths",
        "256",
        "--factors",
        factors,
        "--dtype",
        "float32",
        "--no-fuse",
    ]
    assert main(args) == 2
    assert message in capsys.readouterr().err.strip().splitlines()[-1]
