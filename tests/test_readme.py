"""The README's tables are rendered from result files only: check the renderers on small hand-made files."""

import json

import pandas as pd

from apo_helpers.analysis.readme import bench_train_table, render_readme, trained_table


def _seeds(path, objective, successes):
    rows = [{"objective": objective, "seed": s, "profile": "class", "iterations": 120, "test_success": v,
             "test_score": 0.8, "test_steps": 4.0, "test_invalid_rate": 0.05, "train_seconds": 600.0}
            for s, v in enumerate(successes)]
    rows.append({"objective": "pi_ref", "seed": None, "profile": "class", "iterations": 0, "test_success": 0.385,
                 "test_score": 0.736, "test_steps": 4.1, "test_invalid_rate": 0.085})
    pd.DataFrame(rows).to_csv(path, index=False)


def test_trained_table_gives_mean_spread_and_reference(tmp_path):
    assert trained_table(tmp_path) is None
    _seeds(tmp_path / "apo_class_seeds.csv", "apo", [0.40, 0.45, 0.50])
    table = trained_table(tmp_path)
    lines = table.splitlines()
    assert lines[2].startswith("| pi_ref (start) |") and "38.5%" in lines[2]
    assert lines[3].startswith("| apo | 3 | 45.0% ± 4.1% | 40.0%, 45.0%, 50.0% |")
    assert "10.0" in lines[3]  # minutes per seed


def test_bench_train_table_and_sections_are_filled(tmp_path):
    (tmp_path / "bench_train.json").write_text(json.dumps({
        "batch_goals": 32, "device": "cpu", "torch_threads": 2, "seconds_median": 5.5, "rollout_seconds_median": 2.0,
        "policy_forward_seconds_median": 1.0, "ref_seconds_median": 1.0, "update_seconds_median": 1.5,
        "target_seconds": 6.0}))
    assert "| 32 | cpu | 2 | 5.50 |" in bench_train_table(tmp_path)
    text = "a\n<!-- bench-train:start -->\nold\n<!-- bench-train:end -->\nb\n"
    rendered = render_readme(text, tmp_path)
    assert "old" not in rendered and "5.50" in rendered and rendered.startswith("a\n") and rendered.endswith("b\n")
