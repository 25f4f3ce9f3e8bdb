"""A setting swept over committed runs: per-seed rows, late-window KL, the summary, and the errors (notebook 07)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from apo_helpers.analysis import plots  # noqa: E402
from apo_helpers.analysis.sweeps import (  # noqa: E402
    SWEEP_COLUMNS, across_references, labelled_summary, option_behaviour, sweep_summary, sweep_table)

REF = "pi_ref_a"


def write_run(results, name, successes, kl_per_seed, ref=REF, ref_success=0.3, with_ref=True, iterations=60):
    """A committed run: seeds table (pi_ref's row, one row per seed) and a history whose KL is ``kl_per_seed[k]``
    from iteration 40 on and 100 before (so a wrong window shows)."""
    rows = [{"objective": "pi_ref", "seed": float("nan"), "ref": ref, "test_success": ref_success,
             "val_success": 0.2}] if with_ref else []
    rows += [{"objective": "apo", "seed": float(k), "ref": ref, "test_success": s, "val_success": s - 0.05}
             for k, s in enumerate(successes)]
    pd.DataFrame(rows).to_csv(results / f"{name}_class_seeds.csv", index=False)
    history = [{"iteration": i, "seed": k, "kl": kl if i >= 40 else 100.0, "log_ratio_abs": 2 * kl,
                "grad_norm": kl / 10}
               for k, kl in enumerate(kl_per_seed) for i in range(1, iterations + 1)]
    pd.DataFrame(history).to_csv(results / f"{name}_class_history.csv", index=False)


def test_one_row_per_value_and_seed_with_the_late_window_kl(tmp_path):
    write_run(tmp_path, "big", [0.35, 0.37], [1.0, 2.0])
    write_run(tmp_path, "small", [0.40, 0.38], [3.0, 5.0])
    table = sweep_table({0.03: "big", 0.003: "small"}, results=tmp_path)
    assert list(table.columns) == SWEEP_COLUMNS
    assert len(table) == 4
    small = table[table["value"] == 0.003].set_index("seed")
    assert small.loc[1, "kl"] == pytest.approx(5.0)  # iterations 40-59 only: the 100s before are left out
    assert small.loc[1, "log_ratio_abs"] == pytest.approx(10.0)
    assert small.loc[1, "grad_norm"] == pytest.approx(0.5)
    assert small.loc[0, "test_success"] == pytest.approx(0.40)
    assert (table["ref_test_success"] == 0.3).all()


def test_labelled_summary_keeps_the_given_order_and_adds_the_option_columns(tmp_path):
    write_run(tmp_path, "plain", [0.35, 0.37], [1.0, 2.0])
    write_run(tmp_path, "drawn", [0.40, 0.38], [3.0, 5.0])
    runs = {"without draws": "plain", "with draws": "drawn"}
    seeds = pd.read_csv(tmp_path / "drawn_class_seeds.csv")
    seeds["test_option_clicked"], seeds["test_options_right"], seeds["test_invalid_rate"] = 0.8, 0.25, 0.1
    seeds.loc[seeds["objective"] == "pi_ref", "test_option_clicked"] = 0.0  # pi_ref's row is not averaged in
    seeds.to_csv(tmp_path / "drawn_class_seeds.csv", index=False)
    summary = labelled_summary(runs, results=tmp_path)
    assert list(summary.index) == ["without draws", "with draws"]  # the given order, not sorted by label
    assert summary.loc["with draws", "test success"] == pytest.approx(0.39)
    assert summary.loc["with draws", "option clicked"] == pytest.approx(0.8)
    assert summary.loc["with draws", "invalid actions"] == pytest.approx(0.1)
    assert pd.isna(summary.loc["without draws", "every value right"])  # an older table without the column
    assert labelled_summary({**runs, "missing": "not_committed"}, results=tmp_path) is None


def test_option_behaviour_averages_one_objective_s_rows(tmp_path):
    write_run(tmp_path, "run", [0.35, 0.37], [1.0, 2.0])
    seeds = pd.read_csv(tmp_path / "run_class_seeds.csv")
    seeds["test_option_clicked"] = [0.3, 0.7, 0.9]  # pi_ref's row first, then the two seeds
    seeds["test_options_right"] = [0.1, 0.2, 0.3]
    seeds.to_csv(tmp_path / "run_class_seeds.csv", index=False)
    trained = option_behaviour("run", results=tmp_path)
    assert trained["option clicked"] == pytest.approx(0.8) and trained["every value right"] == pytest.approx(0.25)
    assert trained["rows averaged"] == 2 and pd.isna(trained["success, goals with options"])  # a column the table lacks
    ref = option_behaviour("run", objective="pi_ref", results=tmp_path)
    assert ref["option clicked"] == pytest.approx(0.3) and ref["rows averaged"] == 1
    with pytest.raises(ValueError, match="no 'grpo' rows"):
        option_behaviour("run", objective="grpo", results=tmp_path)
    with pytest.raises(FileNotFoundError, match="not_committed"):
        option_behaviour("not_committed", results=tmp_path)


def test_across_references_measures_each_run_against_its_own_pi_ref(tmp_path):
    write_run(tmp_path, "half", [0.35, 0.37], [1.0, 2.0], ref="pi_ref_half", ref_success=0.33)
    write_run(tmp_path, "most", [0.40, 0.38], [3.0, 5.0], ref="pi_ref_most", ref_success=0.28)
    seeds = pd.read_csv(tmp_path / "most_class_seeds.csv")
    seeds["test_option_clicked"] = [0.1, 0.7, 0.9]  # pi_ref's row first, then the two seeds
    seeds["test_options_right"] = [0.05, 0.2, 0.3]
    seeds.to_csv(tmp_path / "most_class_seeds.csv", index=False)
    runs = {"most left out": "most", "half left out": "half"}
    table = across_references(runs, results=tmp_path)
    assert list(table.index) == ["most left out", "half left out"]  # the given order
    most = table.loc["most left out"]
    assert most["gain over π_ref"] == pytest.approx(0.39 - 0.28)  # against its own pi_ref, not the other's
    assert table.loc["half left out", "gain over π_ref"] == pytest.approx(0.36 - 0.33)
    assert most["std over seeds"] == pytest.approx(0.01)
    assert most["π_ref: option clicked"] == pytest.approx(0.1) and most["option clicked"] == pytest.approx(0.8)
    assert most["every value right"] == pytest.approx(0.25)
    assert pd.isna(table.loc["half left out", "option clicked"])  # an older table without the column
    assert across_references({**runs, "missing": "not_committed"}, results=tmp_path) is None
    write_run(tmp_path, "no_ref", [0.35], [1.0], with_ref=False)
    with pytest.raises(ValueError, match="no_ref"):
        across_references({"no pi_ref row": "no_ref"}, results=tmp_path)


def test_the_window_can_move(tmp_path):
    write_run(tmp_path, "run", [0.35], [1.0])
    table = sweep_table({0.03: "run"}, late=(30, 49), results=tmp_path)
    assert table["kl"].iloc[0] == pytest.approx((10 * 100.0 + 10 * 1.0) / 20)


def test_summary_gives_mean_spread_gain_lowest_value_first(tmp_path):
    write_run(tmp_path, "big", [0.35, 0.37], [1.0, 2.0])
    write_run(tmp_path, "small", [0.40, 0.38], [3.0, 5.0])
    summary = sweep_summary(sweep_table({0.03: "big", 0.003: "small"}, results=tmp_path))
    assert list(summary.index) == [0.003, 0.03]
    assert summary.loc[0.003, "test success"] == pytest.approx(0.39)
    assert summary.loc[0.003, "std over seeds"] == pytest.approx(0.01)  # ddof=0, as the README's tables
    assert summary.loc[0.003, "gain over π_ref"] == pytest.approx(0.09)
    assert summary.loc[0.03, "KL (late)"] == pytest.approx(1.5)
    assert summary.loc[0.03, "seeds"] == 2


def test_a_missing_run_is_skipped_or_named(tmp_path):
    write_run(tmp_path, "big", [0.35], [1.0])
    assert set(sweep_table({0.03: "big", 0.001: "absent"}, results=tmp_path)["run"]) == {"big"}
    with pytest.raises(FileNotFoundError, match="absent"):
        sweep_table({0.03: "big", 0.001: "absent"}, results=tmp_path, skip_missing=False)


def test_runs_from_different_pi_refs_do_not_compare(tmp_path):
    write_run(tmp_path, "big", [0.35], [1.0])
    write_run(tmp_path, "other", [0.35], [1.0], ref="pi_ref_b")
    with pytest.raises(ValueError, match="different pi_refs"):
        sweep_table({0.03: "big", 0.01: "other"}, results=tmp_path)


def test_a_run_without_its_pi_ref_row_or_late_history_is_an_error(tmp_path):
    write_run(tmp_path, "noref", [0.35], [1.0], with_ref=False)
    with pytest.raises(ValueError, match="no pi_ref row"):
        sweep_table({0.03: "noref"}, results=tmp_path)
    write_run(tmp_path, "short", [0.35], [1.0], iterations=30)
    with pytest.raises(ValueError, match="no history in iterations 40-59"):
        sweep_table({0.03: "short"}, results=tmp_path)


def test_the_figure_has_a_point_per_value_on_every_panel(tmp_path):
    write_run(tmp_path, "big", [0.35, 0.37], [1.0, 2.0])
    write_run(tmp_path, "small", [0.40, 0.38], [3.0, 5.0])
    fig = plots.sweep_effect(sweep_table({0.03: "big", 0.003: "small"}, results=tmp_path), target=0.10)
    success_ax, kl_ax, grad_ax = fig.axes
    assert [len(ax.containers) for ax in fig.axes] == [2, 2, 2]  # one errorbar per value
    means = sorted(c.lines[0].get_ydata()[0] for c in grad_ax.containers)
    assert means == pytest.approx([0.15, 0.4])  # each value's mean of its seeds' gradient norms
    assert success_ax.get_xscale() == "log"
    for ax in fig.axes:  # labelled at the swept values, nowhere else
        assert [t.get_text() for t in ax.get_xticklabels()] == ["0.003", "0.03"]
        assert len(ax.xaxis.get_minorticklocs()) == 0
    assert sorted(line.get_ydata()[0] for line in success_ax.lines if len(line.get_xdata()) == 2) == \
        pytest.approx([0.3, 0.4])  # pi_ref's line and the target's
    plt.close(fig)


def test_labels_as_values_and_a_history_without_gradient_norms(tmp_path):
    write_run(tmp_path, "old", [0.35], [1.0])
    history = pd.read_csv(tmp_path / "old_class_history.csv").drop(columns="grad_norm")
    history.to_csv(tmp_path / "old_class_history.csv", index=False)
    table = sweep_table({"held recipe": "old"}, results=tmp_path)
    assert table["value"].tolist() == ["held recipe"]
    assert table["grad_norm"].isna().all() and table["kl"].iloc[0] == pytest.approx(1.0)
