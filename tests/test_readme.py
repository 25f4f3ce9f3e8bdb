"""The README's tables are rendered from result files only: check the renderers on small hand-made files."""

import json

import pandas as pd
import pytest

from apo_helpers.analysis.readme import bench_train_table, render_readme, trained_table


def _seeds(path, objective, successes, ref_success=0.385, ref_score=0.736, **extra):
    rows = [{"objective": objective, "seed": s, "profile": "class", "iterations": 120, "test_success": v,
             "test_score": 0.8, "test_steps": 4.0, "test_invalid_rate": 0.05, "train_seconds": 600.0, **extra}
            for s, v in enumerate(successes)]
    rows.append({"objective": "pi_ref", "seed": None, "profile": "class", "iterations": 0,
                 "test_success": ref_success, "test_score": ref_score, "test_steps": 4.1, "test_invalid_rate": 0.085})
    pd.DataFrame(rows).to_csv(path, index=False)


def test_trained_table_gives_mean_spread_and_reference(tmp_path):
    assert trained_table(tmp_path) is None
    _seeds(tmp_path / "apo_class_seeds.csv", "apo", [0.40, 0.45, 0.50])
    table = trained_table(tmp_path)
    lines = table.splitlines()
    assert lines[2].startswith("| pi_ref (start) | full expert |") and "38.5%" in lines[2]
    assert lines[3].startswith("| apo | full expert | 3 | 45.0% ± 4.1% | 40.0%, 45.0%, 50.0% |")
    assert lines[3].endswith("| 10.0 | apo | not recorded |")  # minutes per seed, the table, the --set changes
    _seeds(tmp_path / "apo_class_seeds.csv", "apo", [0.40], apo_overrides=None)  # run on the profile's settings
    assert trained_table(tmp_path).splitlines()[3].endswith("| apo | none |")
    _seeds(tmp_path / "apo_class_seeds.csv", "apo", [0.40], apo_overrides="greedy_search=True lr=0.001")
    assert trained_table(tmp_path).splitlines()[3].endswith("| apo | `greedy_search=True lr=0.001` |")
    _seeds(tmp_path / "apo_class_seeds.csv", "apo", [0.40], apo_overrides="beta2=0.03", ref_rounds=1,
           ref_iterations=60)  # each seed re-anchored on its own earlier run's policy: the row says after what
    assert trained_table(tmp_path).splitlines()[3].endswith(
        "| apo | `beta2=0.03`; re-anchored on each seed's policy after 60 iterations (1 run) |")
    _seeds(tmp_path / "apo_class_seeds.csv", "apo", [0.40], apo_overrides="beta2=0.03", ref_rounds=1,
           ref_iterations=60, ref_averaged=3)  # every seed re-anchored on the earlier seeds' averaged policy
    assert trained_table(tmp_path).splitlines()[3].endswith(
        "| apo | `beta2=0.03`; re-anchored on the average of 3 seeds' policies after 60 iterations (1 run) |")
    _seeds(tmp_path / "apo_class_seeds.csv", "apo", [0.40], apo_overrides="beta2=0.03", ref_rounds=0,
           ref_iterations=0)
    assert trained_table(tmp_path).splitlines()[3].endswith("| apo | `beta2=0.03` |")
    _seeds(tmp_path / "apo_class_seeds.csv", "apo", [0.40], device="cuda:0")   # a GPU's minutes say so
    assert trained_table(tmp_path).splitlines()[3].endswith("| 10.0 (cuda:0) | apo | not recorded |")


def test_trained_table_keeps_each_pi_ref_with_its_runs(tmp_path):
    _seeds(tmp_path / "apo_class_seeds.csv", "apo", [0.40, 0.45, 0.50], demo_skip_options=0.0)
    _seeds(tmp_path / "apo_sloppy_class_seeds.csv", "apo", [0.30, 0.35], ref_success=0.275, demo_skip_options=0.5)
    lines = trained_table(tmp_path).splitlines()
    assert len(lines) == 6
    assert lines[4].startswith("| pi_ref (start) | options ignored in 50% | - | 27.5% |")
    assert lines[5].startswith("| apo | options ignored in 50% | 2 | 32.5% ± 2.5% |")
    # a second objective from the same pi_ref joins its group without repeating pi_ref's row
    _seeds(tmp_path / "apo_split_sloppy_class_seeds.csv", "apo_split", [0.28], ref_success=0.275,
           demo_skip_options=0.5)
    lines = trained_table(tmp_path).splitlines()
    assert len(lines) == 7 and sum("pi_ref (start)" in line for line in lines) == 2
    assert lines[6].startswith("| apo_split | options ignored in 50% | 1 | 28.0% ± 0.0% |")
    # the same demonstrations on pages that show the selection: another pi_ref, another group
    _seeds(tmp_path / "apo_sloppy_selected_class_seeds.csv", "apo", [0.40], ref_success=0.30, demo_skip_options=0.5,
           show_selected_options=True)
    lines = trained_table(tmp_path).splitlines()
    assert len(lines) == 9 and sum("pi_ref (start)" in line for line in lines) == 3
    assert lines[7].startswith("| pi_ref (start) | options ignored in 50%; pages show the selection | - | 30.0% |")
    assert lines[8].startswith("| apo | options ignored in 50%; pages show the selection | 1 | 40.0% ± 0.0% |")
    # a pi_ref that imitated fewer demonstrations: its own group, the count in its label
    _seeds(tmp_path / "apo_demos150_class_seeds.csv", "apo", [0.25, 0.27], ref_success=0.125, demo_skip_options=0.0,
           ref_demonstrations=148)
    lines = trained_table(tmp_path).splitlines()
    assert len(lines) == 11 and sum("pi_ref (start)" in line for line in lines) == 4
    assert lines[4].startswith("| pi_ref (start) | full expert; 148 demonstrations | - | 12.5% |")
    assert lines[5].startswith("| apo | full expert; 148 demonstrations | 2 | 26.0% ± 1.0% |")
    # a demonstrator that checks the options but does not select them: its own group and label
    _seeds(tmp_path / "apo_forget_class_seeds.csv", "apo", [0.36], ref_success=0.29, demo_skip_options=0.0,
           demo_forget_options=0.5)
    lines = trained_table(tmp_path).splitlines()
    assert len(lines) == 13 and sum("pi_ref (start)" in line for line in lines) == 5
    assert any(line.startswith("| pi_ref (start) | options checked, not selected in 50% | - | 29.0% |") for line in lines)
    # a resized tiny Llama (train-ref --model): its own group, its size in the label
    _seeds(tmp_path / "apo_wide_class_seeds.csv", "apo", [0.25], ref_success=0.21, demo_skip_options=0.5,
           ref_demonstrations=595, ref_model_size="hidden 256, 4 layers, 3.9M parameters")
    lines = trained_table(tmp_path).splitlines()
    assert len(lines) == 15 and any(line.startswith(
        "| pi_ref (start) | options ignored in 50%; 595 demonstrations; hidden 256, 4 layers, 3.9M parameters | - | "
        "21.0% |") for line in lines)
    # a pi_ref imitated for fewer steps (train-ref --sft-steps): its own group, its steps in the label
    _seeds(tmp_path / "apo_short_class_seeds.csv", "apo", [0.23], ref_success=0.195, demo_skip_options=0.5,
           ref_demonstrations=595, ref_model_size="hidden 256, 4 layers, 3.9M parameters", ref_sft_steps=400)
    lines = trained_table(tmp_path).splitlines()
    assert len(lines) == 17 and any(line.startswith(
        "| pi_ref (start) | options ignored in 50%; 595 demonstrations; hidden 256, 4 layers, 3.9M parameters; "
        "400 imitation steps | - | 19.5% |") for line in lines)
    # a demonstrator whose thinks read on in the instruction (train-ref --progress-think): its own group and label;
    # tables that record the short think say nothing more
    _seeds(tmp_path / "apo_think_class_seeds.csv", "apo", [0.50], ref_success=0.44, demo_skip_options=0.5,
           ref_demonstrations=1192, demo_think="progress")
    _seeds(tmp_path / "apo_nothink_class_seeds.csv", "apo", [0.33], ref_success=0.32, demo_skip_options=0.5,
           ref_demonstrations=1192, demo_think="short")
    lines = trained_table(tmp_path).splitlines()
    assert len(lines) == 21
    assert any(line.startswith("| pi_ref (start) | options ignored in 50%; progress thinks; 1192 demonstrations | - | "
                               "44.0% |") for line in lines)
    assert any(line.startswith("| pi_ref (start) | options ignored in 50%; 1192 demonstrations | - | 32.0% |")
               for line in lines)
    # a demonstrator that searched the instruction's description (train-ref --query description): its own group
    # and label, though its other columns match the short think's; tables that record the whole instruction say
    # nothing more
    _seeds(tmp_path / "apo_qdesc_class_seeds.csv", "apo", [0.41], ref_success=0.31, demo_skip_options=0.5,
           ref_demonstrations=1192, demo_think="short", demo_query="description")
    _seeds(tmp_path / "apo_qinst_class_seeds.csv", "apo", [0.34], ref_success=0.32, demo_skip_options=0.5,
           ref_demonstrations=1192, demo_think="short", demo_query="instruction")
    lines = trained_table(tmp_path).splitlines()
    assert any(line.startswith("| pi_ref (start) | options ignored in 50%; description queries; 1192 demonstrations "
                               "| - | 31.0% |") for line in lines)
    assert sum(line.startswith("| pi_ref (start) | options ignored in 50%; 1192 demonstrations | - |")
               for line in lines) == 1


def test_trained_table_groups_tables_of_one_pi_ref_folder(tmp_path):
    # an older table of a pi_ref and a newer one that also records its demonstrations: one group, the fuller label
    _seeds(tmp_path / "apo_sloppy_class_seeds.csv", "apo", [0.30], ref_success=0.275, demo_skip_options=0.5,
           ref="pi_ref_sloppy")
    _seeds(tmp_path / "apo_sloppy_b03_class_seeds.csv", "apo", [0.34], ref_success=0.275, demo_skip_options=0.5,
           ref="pi_ref_sloppy", ref_demonstrations=595)
    lines = trained_table(tmp_path).splitlines()
    assert len(lines) == 5 and sum("pi_ref (start)" in line for line in lines) == 1
    assert all("options ignored in 50%; 595 demonstrations" in line for line in lines[2:])
    # another pi_ref folder with the same description is another group
    _seeds(tmp_path / "apo_zother_class_seeds.csv", "apo", [0.31], ref_success=0.26, demo_skip_options=0.5,
           ref="pi_ref_other", ref_demonstrations=595)
    lines = trained_table(tmp_path).splitlines()
    assert sum("pi_ref (start)" in line for line in lines) == 2
    # ... and its label names its folder, so the two start rows are told apart (the first keeps its label)
    assert [line.split(" | ")[1] for line in lines if "pi_ref (start)" in line] == [
        "options ignored in 50%; 595 demonstrations", "options ignored in 50%; 595 demonstrations; `pi_ref_other`"]
    # the first folder retrained in place (other weights, another pi_ref score): a third group, labelled so
    _seeds(tmp_path / "apo_sloppy_rerun_class_seeds.csv", "apo", [0.29], ref_success=0.27, ref_score=0.683,
           demo_skip_options=0.5, ref="pi_ref_sloppy", ref_demonstrations=595)
    starts = [line.split(" | ")[1:4] for line in trained_table(tmp_path).splitlines() if "pi_ref (start)" in line]
    assert starts == [["options ignored in 50%; 595 demonstrations", "-", "27.5%"],
                      ["options ignored in 50%; 595 demonstrations; retrained in place", "-", "27.0%"],
                      ["options ignored in 50%; 595 demonstrations; `pi_ref_other`", "-", "26.0%"]]


def test_ref_spread_table_sets_the_gain_per_pi_ref_beside_the_seeds_spread(tmp_path):
    from apo_helpers.analysis.readme import ref_spread_table

    recipe = dict(demo_skip_options=0.5, ref_demonstrations=595, apo_overrides="beta2=0.03")
    _seeds(tmp_path / "apo_a_class_seeds.csv", "apo", [0.34, 0.36], ref_success=0.275, ref="pi_ref_sloppy", **recipe)
    assert ref_spread_table(tmp_path) is None  # one pi_ref: no spread over pi_refs to report
    # the same recipe from the folder retrained in place and from a pi_ref of another seed
    _seeds(tmp_path / "apo_b_class_seeds.csv", "apo", [0.28, 0.30], ref_success=0.27, ref_score=0.683,
           ref="pi_ref_sloppy", **recipe)
    _seeds(tmp_path / "apo_c_class_seeds.csv", "apo", [0.33], ref_success=0.30, ref_score=0.70,
           ref="pi_ref_sloppy_seed_1", **recipe)
    # not the same recipe: other --set changes, other iterations, another demonstrator
    _seeds(tmp_path / "apo_d_class_seeds.csv", "apo", [0.50], ref_success=0.27, ref_score=0.683, ref="pi_ref_sloppy",
           **dict(recipe, apo_overrides="beta2=0.01"))
    _seeds(tmp_path / "apo_e_class_seeds.csv", "apo", [0.50], ref_success=0.30, ref_score=0.70,
           ref="pi_ref_sloppy_seed_1", iterations=60, **recipe)
    _seeds(tmp_path / "apo_f_class_seeds.csv", "apo", [0.50], ref_success=0.385, ref="pi_ref_full",
           **dict(recipe, demo_skip_options=0.0))
    lines = ref_spread_table(tmp_path).splitlines()
    assert len(lines) == 3  # one recipe ran from several pi_refs
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    assert cells[:6] == ["options ignored in 50%; 595 demonstrations", "apo", "`beta2=0.03`", "120", "3", "2, 2, 1"]
    assert cells[6:9] == ["27.5%, 27.0%, 30.0%", "35.0%, 29.0%, 33.0%", "+7.5, +2.0, +3.0"]
    assert cells[9] == "+4.2 ± 2.4"  # gains 7.5, 2.0, 3.0: mean 4.17, population std 2.39
    assert cells[10] == "0.7"        # the seeds' spreads 1.0, 1.0 and 0.0
    assert cells[11] == "0 of 3"     # no pi_ref gains +10 points
    # starts 27.5, 27.0, 30.0 against gains 7.5, 2.0, 3.0: covariance -1.833 over sqrt(5.167 * 17.167) = -0.195
    assert cells[12] == "-0.19"
    assert cells[13] == "apo_a, apo_b, apo_c"
    # gains that cancel (float noise below zero) print as +0.0, not -0.0
    other = dict(recipe, apo_overrides="temperature=1.6")
    _seeds(tmp_path / "apo_g_class_seeds.csv", "apo", [0.31, 0.32, 0.31], ref_success=0.32, ref="pi_ref_sloppy_seed_1",
           ref_score=0.70, **other)
    _seeds(tmp_path / "apo_h_class_seeds.csv", "apo", [0.265, 0.26, 0.275], ref_success=0.26,
           ref="pi_ref_sloppy_seed_2", ref_score=0.65, **other)
    row = next(line for line in ref_spread_table(tmp_path).splitlines() if "temperature=1.6" in line)
    assert "| -0.7, +0.7 | +0.0 ± 0.7 | 0.5 | 0 of 2 | - |" in row  # two pi_refs: no correlation


def test_ref_spread_counts_a_pi_ref_at_the_target_only_when_its_gain_outgrows_its_seeds_spread(tmp_path):
    from apo_helpers.analysis.readme import ref_spread

    recipe = dict(demo_skip_options=0.5, ref_demonstrations=1192, apo_overrides="beta2=0.003")
    # +10 exactly with seeds that agree: met; +12 whose seeds spread 15 points apart: not met; +9: not met
    _seeds(tmp_path / "apo_a_class_seeds.csv", "apo", [0.40, 0.40], ref_success=0.30, ref="pi_ref_a", **recipe)
    _seeds(tmp_path / "apo_b_class_seeds.csv", "apo", [0.27, 0.57], ref_success=0.30, ref="pi_ref_b", **recipe)
    _seeds(tmp_path / "apo_c_class_seeds.csv", "apo", [0.39, 0.39], ref_success=0.30, ref="pi_ref_c", **recipe)
    row = ref_spread(tmp_path).iloc[0]
    assert [round(g, 3) for g in row["gains"]] == [0.10, 0.12, 0.09]
    assert row["refs_at_target"] == 1


def test_starts_and_ends_gives_every_run_its_first_pi_ref_and_seeds(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from apo_helpers.analysis import plots
    from apo_helpers.analysis.readme import starts_and_ends

    assert starts_and_ends(tmp_path).empty
    _seeds(tmp_path / "apo_class_seeds.csv", "apo", [0.40, 0.45, 0.50])  # an older table: no size, no rounds
    _seeds(tmp_path / "apo_wide_r2_class_seeds.csv", "apo", [0.36, 0.38], ref_success=0.295, ref="pi_ref_wide",
           ref_model_size="hidden 192, 4 layers, 2.3M parameters", ref_rounds=1, ref_iterations=60)
    orphan = pd.DataFrame([{"objective": "apo", "seed": 0, "test_success": 0.3, "test_score": 0.7}])
    orphan.to_csv(tmp_path / "apo_orphan_class_seeds.csv", index=False)  # no pi_ref row: left out
    table = starts_and_ends(tmp_path).set_index("table")
    assert sorted(table.index) == ["apo", "apo_wide_r2"]
    first, wide = table.loc["apo"], table.loc["apo_wide_r2"]
    assert (first["start"], first["lowest"], first["highest"], first["seeds"]) == (0.385, 0.40, 0.50, 3)
    assert first["end"] == pytest.approx(0.45) and (first["model"], first["rounds"]) == ("1.1M", 0)
    assert (wide["start"], wide["model"], wide["rounds"], wide["seeds"]) == (0.295, "2.3M", 1, 2)
    assert wide["end"] == pytest.approx(0.37)
    _seeds(tmp_path / "apo_deep_class_seeds.csv", "apo", [0.35], ref="pi_ref_deep",
           ref_model_size="hidden 128, 8 layers, 2.0M parameters")
    assert starts_and_ends(tmp_path).set_index("table").loc["apo_deep", "model"] == "2.0M, 8 layers"
    fig = plots.start_and_end(table.reset_index(), target=0.10)
    ax = fig.axes[0]
    points = [line for line in ax.get_lines() if line.get_marker() == "o"]
    assert sorted(p.get_xdata()[0] for p in points) == [0.295, 0.385]  # one point per run, at its pi_ref's start
    target = next(line for line in ax.get_lines() if line.get_linestyle() == "--")
    assert target.get_ydata()[0] - target.get_xdata()[0] == pytest.approx(0.10)
    plt.close(fig)


def test_runs_from_reference_finds_every_run_counted_from_one_pi_ref(tmp_path):
    from apo_helpers.analysis.readme import runs_from_reference

    assert runs_from_reference("pi_ref_wide", tmp_path).empty
    _seeds(tmp_path / "apo_class_seeds.csv", "apo", [0.40, 0.45])  # an older table: no ref column, left out
    _seeds(tmp_path / "apo_wide_class_seeds.csv", "apo", [0.36, 0.38], ref="pi_ref_wide")
    _seeds(tmp_path / "apo_wide_r2_class_seeds.csv", "apo", [0.40, 0.42, 0.44], ref="pi_ref_wide", ref_rounds=1)
    _seeds(tmp_path / "apo_other_class_seeds.csv", "apo", [0.60], ref="pi_ref_other")
    runs = runs_from_reference("pi_ref_wide", tmp_path)
    assert runs["table"].tolist() == ["apo_wide_r2", "apo_wide"]  # the re-anchored run counts from its first pi_ref
    assert runs["seeds"].tolist() == [3, 2] and runs["test_success"].tolist() == pytest.approx([0.42, 0.37])
    from apo_helpers.analysis.readme import starts_and_ends  # a table already read gives the same rows

    pd.testing.assert_frame_equal(runs_from_reference("pi_ref_wide", runs=starts_and_ends(tmp_path)), runs)


def test_bench_train_table_and_sections_are_filled(tmp_path):
    (tmp_path / "bench_train.json").write_text(json.dumps({
        "batch_goals": 32, "device": "cpu", "torch_threads": 2, "seconds_median": 5.5, "rollout_seconds_median": 2.0,
        "policy_forward_seconds_median": 1.0, "ref_seconds_median": 1.0, "update_seconds_median": 1.5,
        "target_seconds": 6.0}))
    assert "| ? | apo | 32 | cpu | not recorded | 2 | 5.50 |" in bench_train_table(tmp_path)  # saved before numerics
    # `bench train --objective all`: a list, one row per objective, memory left out
    row = json.loads((tmp_path / "bench_train.json").read_text())
    (tmp_path / "bench_train_objectives.json").write_text(json.dumps(
        [dict(row, objective="grpo", seconds_median=4.25), dict(row, objective="ppo", seconds_median=7.0)]))
    table = bench_train_table(tmp_path)
    assert "| ? | grpo | 32 | cpu | not recorded | 2 | 4.25 |" in table
    assert "| ? | ppo | 32 | cpu | not recorded | 2 | 7.00 |" in table
    (tmp_path / "bench_train_gpu.json").write_text(json.dumps(dict(row, device="cuda:0", numerics={
        "processor": "Some CPU", "cpu_capability": "AVX512", "gpu": "Some GPU"})))
    assert "| ? | apo | 32 | cuda:0 | Some GPU | 2 | 5.50 |" in bench_train_table(tmp_path)
    text = "a\n<!-- bench-train:start -->\nold\n<!-- bench-train:end -->\nb\n"
    rendered = render_readme(text, tmp_path)
    assert "old" not in rendered and "5.50" in rendered and rendered.startswith("a\n") and rendered.endswith("b\n")


def test_compare_table_has_a_row_per_objective(tmp_path):
    from apo_helpers.analysis.readme import compare_table

    assert compare_table(tmp_path) is None
    pd.DataFrame([{"objective": o, "seeds": 3, "test_success": v, "test_success_std": 0.02, "test_score": 0.7,
                   "train_seconds": 600.0, "stage1_seconds": s1, "total_seconds": 600.0 + s1,
                   "seconds_to_val_0.8": None, "seeds_reaching_target": 0, "episodes": 960, "generated_tokens": 8e4,
                   "peak_memory_mb": 900.0} for o, v, s1 in [("apo", 0.4, 466.9), ("grpo", 0.35, 0.0)]]
                 ).to_csv(tmp_path / "compare_class_summary.csv", index=False)
    lines = compare_table(tmp_path).splitlines()
    assert len(lines) == 4 and "val ≥ 0.8 reached by" in lines[0]
    assert lines[2].startswith("| apo | 3 | 40.0% ± 2.0% | 0.700 | 10.0 | 7.8 | 0 seeds | 960 | 80,000 | 900 |")
    assert lines[3].startswith("| grpo | 3 | 35.0% ± 2.0% |")


def test_pretrained_table_names_the_stage_and_settings(tmp_path):
    from apo_helpers.analysis.readme import pretrained_table

    assert pretrained_table(tmp_path) is None
    pd.DataFrame([{"stage": st, "format_valid_rate": f, "success_rate": 0.0, "mean_score": 0.1, "invalid_rate": 0.5,
                   "mean_steps": 10, "episodes": 8, "train_seconds": t, "eval_seconds": 1.0, "model": "smollm2-135m",
                   "parameters_m": 134.5, "device": "cpu", "profile": "class", "demonstrations": 32, "batch_size": 4,
                   "lr": 5e-5, "max_new_tokens": 48, "max_turns": 10, "final_imitation_loss": 1.0}
                  for st, f, t in [("zero-shot", 0.0, 0.0), ("after 12 imitation steps", 0.9, 300.0)]]
                 ).to_csv(tmp_path / "pretrained_class.csv", index=False)
    lines = pretrained_table(tmp_path).splitlines()
    assert lines[2].startswith("| smollm2-135m | zero-shot | cpu | 0.0% | 0.0% |")
    assert lines[3].startswith("| smollm2-135m | after 12 imitation steps | cpu | 90.0% |")
    assert "32 demos, batch 4, lr 5e-05" in lines[3]


def test_ref_sweep_table_sorts_by_pretraining_then_demonstrations(tmp_path):
    from apo_helpers.analysis.readme import ref_sweep_table
    from apo_helpers.files import merge_csv_rows

    assert ref_sweep_table(tmp_path) is None
    for count, pretrain, success in [(600, 0, 0.2), (300, 300, 0.3), (150, 300, 0.1)]:
        merge_csv_rows(tmp_path / "ref_sweep.csv", [{
            "demonstrations": count, "pretrain_steps": pretrain, "sft_steps": 1200, "test_success_rate": success,
            "ci95_low": success - 0.05, "ci95_high": success + 0.05, "test_mean_score": 0.7, "invalid_rate": 0.1,
            "train_seconds": 1200.0}], ["demonstrations", "pretrain_steps", "sft_steps"])
    lines = ref_sweep_table(tmp_path).splitlines()
    assert [line.split(" | ")[:2] for line in lines[2:]] == [["| 600", "0"], ["| 150", "300"], ["| 300", "300"]]
    assert "| 10.0% [5.0%, 15.0%] |" in lines[3] and lines[3].endswith("| 20.0 |")


def test_bench_rollout_table_shows_the_prefill_bound(tmp_path):
    from apo_helpers.analysis.readme import bench_rollout_table

    (tmp_path / "bench_rollout.json").write_text(json.dumps({
        "batch": 32, "model": "m", "device": "cpu", "tokens_per_second_batched": 1000.0,
        "tokens_per_second_sequential": 400.0, "speedup": 2.5, "generated_tokens": {"batched": 2200, "sequential": 2200},
        "turns": 100, "prompt_tokens": 30000, "seconds_median": {"batched": 2.2, "sequential": 5.5},
        "prefill_seconds_median": {"batched": 1.1, "sequential": 1.0}, "speedup_bound_from_prefill": 5.0}))
    row = bench_rollout_table(tmp_path).splitlines()[2]
    assert row == "| 32 | m | cpu | not recorded | 1,000 | 400 | 2.5x | 300 / 22 | 2.20 / 5.50 | 1.10 / 1.00 | 5.0x |"


def test_gpu_table_reads_the_run_and_its_seeds(tmp_path):
    from apo_helpers.analysis.readme import gpu_table

    assert gpu_table(tmp_path) is None
    ref = {"sft_batch": 8, "sft_steps": 400, "lr": 2e-5, "train_seconds": 61.1, "test_success_rate": 0.62,
           "test_mean_score": 0.87, "test_mean_steps": 3.94}
    (tmp_path / "gpu_run.json").write_text(json.dumps({"device": "GPU X (torch 9)", "model": "smollm2-135m",
                                                       "pi_ref": ref}))
    assert gpu_table(tmp_path) is None  # the seeds file is missing
    pd.DataFrame([{"objective": "apo", "seed": s, "iterations": 20, "episodes": 1280, "test_success": v,
                   "test_score": 0.8, "test_steps": 4.0, "train_seconds": 300.0} for s, v in [(0, 0.6), (1, 0.7)]]
                 + [{"objective": "pi_ref", "test_success": 0.62}]).to_csv(tmp_path / "apo_gpu_seeds.csv", index=False)
    lines = gpu_table(tmp_path).splitlines()
    assert lines[2] == "| pi_ref (smollm2-135m, imitation) | GPU X | - | 62.0% | 0.870 | 3.94 | 400 steps x 8 chats, lr 2e-05 | 61 |"
    assert lines[3] == "| apo | GPU X | 2 | 60.0%, 70.0% | 0.800 | 4.00 | 20 iterations x 64 episodes | 300 |"
    assert len(lines) == 4
    # a second run, from a sloppy demonstrator, whose seeds a wall-clock budget stopped after different iterations
    (tmp_path / "gpu_sloppy_run.json").write_text(json.dumps({
        "device": "GPU Y (torch 9)", "model": "smollm2-135m", "demonstrator": "options ignored in 50%",
        "pi_ref": {**ref, "test_success_rate": 0.46}, "commands": ["train-ref ...", "train --set beta2=0.03 lr=5e-5"]}))
    pd.DataFrame([{"objective": "apo", "seed": s, "iterations": i, "episodes": 64 * i, "test_success": v,
                   "test_score": 0.5, "test_steps": 5.0, "train_seconds": 200.0}
                  for s, i, v in [(0, 8, 0.0), (1, 6, 0.345)]]).to_csv(tmp_path / "apo_gpu_sloppy_gpu_seeds.csv",
                                                                          index=False)
    lines = gpu_table(tmp_path).splitlines()
    assert lines[4] == ("| pi_ref (smollm2-135m, imitation, options ignored in 50%) | GPU Y | - | 46.0% | 0.870 | 3.94 "
                        "| 400 steps x 8 chats, lr 2e-05 | 61 |")
    assert lines[5] == "| apo | GPU Y | 2 | 0.0%, 34.5% | 0.500 | 5.00 | 6-8 iterations x 64 episodes, lr 5e-05 | 200 |"


def test_gpu_table_shows_a_leases_pi_ref_once_and_its_re_anchored_round(tmp_path, monkeypatch):
    from apo_helpers.analysis import readme

    monkeypatch.setattr(readme, "GPU_RUNS", (("lease.json", "r1_seeds.csv"), ("lease.json", "r2_seeds.csv")))
    ref = {"sft_batch": 8, "sft_steps": 400, "lr": 2e-5, "train_seconds": 78.0, "test_success_rate": 0.46,
           "test_mean_score": 0.78, "test_mean_steps": 3.8}
    (tmp_path / "lease.json").write_text(json.dumps({"device": "GPU Z", "model": "m", "pi_ref": ref,
                                                     "commands": ["train --set lr=2e-5"]}))
    for name, rounds in (("r1_seeds.csv", 0), ("r2_seeds.csv", 1)):
        pd.DataFrame([{"objective": "apo", "seed": s, "iterations": 1, "episodes": 64, "test_success": 0.5,
                       "test_score": 0.7, "test_steps": 4.0, "train_seconds": 30.0, "ref_rounds": rounds,
                       "ref_iterations": rounds} for s in (0, 1)]).to_csv(tmp_path / name, index=False)
    lines = readme.gpu_table(tmp_path).splitlines()
    assert [line.split(" | ")[0] for line in lines[2:]] == ["| pi_ref (m, imitation)", "| apo", "| apo, re-anchored"]
    assert "| 1 iteration x 64 episodes, lr 2e-05 |" in lines[-2]
    assert "| 1 + 1 iterations x 64 episodes, lr 2e-05 |" in lines[-1]
    assert list(readme.gpu_gains(tmp_path)["iterations"]) == ["1", "1 + 1"]


def test_gpu_gains_compare_each_run_with_its_pi_ref(tmp_path):
    from apo_helpers.analysis.readme import gpu_gains

    assert gpu_gains(tmp_path).empty
    (tmp_path / "gpu_sloppy_run.json").write_text(json.dumps({
        "device": "GPU Y (torch 9)", "model": "smollm2-135m", "demonstrator": "options ignored in 50%",
        "pi_ref": {"test_success_rate": 0.4}, "commands": ["train-ref ...", "train --set beta2=0.03 lr=2e-5"]}))
    pd.DataFrame([{"objective": "apo", "seed": s, "iterations": i, "test_success": v}
                  for s, i, v in [(0, 5, 0.5), (1, 4, 0.6)]]).to_csv(tmp_path / "apo_gpu_sloppy_gpu_seeds.csv",
                                                                      index=False)
    row = gpu_gains(tmp_path).iloc[0]
    assert (row["run"], row["device"], row["seeds"], row["iterations"], row["lr"]) == (
        "apo_gpu_sloppy_gpu", "GPU Y", 2, "4-5", 2e-5)
    assert row["mean"] == pytest.approx(0.55) and row["spread"] == pytest.approx(0.05)
    assert row["gain"] == pytest.approx(0.15) and row["gain > spread"]
    # one seed: no spread to compare the gain with
    (tmp_path / "gpu_run.json").write_text(json.dumps({"device": "GPU X", "model": "smollm2-135m",
                                                       "pi_ref": {"test_success_rate": 0.62}}))
    pd.DataFrame([{"objective": "apo", "seed": 0, "iterations": 20, "test_success": 0.6}]).to_csv(
        tmp_path / "apo_gpu_seeds.csv", index=False)
    first = gpu_gains(tmp_path).iloc[0]
    assert first["demonstrator"] == "full expert" and pd.isna(first["gain > spread"]) and pd.isna(first["lr"])


def test_generalization_table_gives_each_group_its_gain(tmp_path):
    from apo_helpers.analysis.readme import generalization_table

    assert generalization_table(tmp_path) is None
    rows = [("pi_ref", "trained on", 0.5), ("seed 0", "trained on", 0.6), ("seed 1", "trained on", 0.8),
            ("pi_ref", "unseen, samples disagree", 0.25), ("seed 0", "unseen, samples disagree", 0.5),
            ("seed 1", "unseen, samples disagree", 0.5),
            ("pi_ref", "unseen, all", 0.3), ("seed 0", "unseen, all", 0.3), ("seed 1", "unseen, all", 0.3)]
    pd.DataFrame([{"run": "apo_x_class", "ref": "pi_ref_class", "policy": p, "goals": g,
                   "n_goals": 4 if "disagree" in g else 40, "greedy_success": s, "mean_score": s}
                  for p, g, s in rows]).to_csv(tmp_path / "generalization_class.csv", index=False)
    lines = generalization_table(tmp_path).splitlines()
    assert lines[2] == "| apo_x_class | trained on | 40 | 50.0% | 70.0% ± 10.0% | +20.0% | 2 |"
    assert lines[4] == "| apo_x_class | unseen, all | 40 | 30.0% | 30.0% ± 0.0% | +0.0% | 2 |"
    assert lines[-1] == "| apo_x_class | 40 | 10.0% | 25.0% | +7.5% | +0.0% |"  # 3 of 4 failed: 3/40


def test_gain_intervals_table_gives_each_run_its_interval(tmp_path):
    from apo_helpers.analysis.readme import gain_intervals_table

    assert gain_intervals_table(tmp_path) is None
    pd.DataFrame([{"objective": "apo", "seed": float(s), "ref": "pi_ref_a", "test_success": 1.0} for s in (0, 1)]
                 + [{"objective": "pi_ref", "seed": None, "ref": "pi_ref_a", "test_success": 0.0}]
                 ).to_csv(tmp_path / "apo_x_class_seeds.csv", index=False)
    rows = [{"policy": p, "seed": s, "split": "test", "goal_index": g, "success": p != "pi_ref_a", "score": 0.5}
            for p, s in (("pi_ref_a", -1), ("apo_x", 0), ("apo_x", 1)) for g in range(20)]
    pd.DataFrame(rows).to_csv(tmp_path / "goal_outcomes_class.csv", index=False)
    lines = gain_intervals_table(tmp_path).splitlines()
    assert lines[2] == "| apo_x | 2 | 100.0% | pi_ref_a | 0.0% | +100.0% | 20.0 / 0.0 | [+100.0%, +100.0%] | 100% |"
    rows[-1]["success"] = False  # seed 1 now fails a goal: the outcomes no longer match the seeds table
    pd.DataFrame(rows).to_csv(tmp_path / "goal_outcomes_class.csv", index=False)
    with pytest.raises(ValueError, match="disagree with the committed seeds tables"):
        gain_intervals_table(tmp_path)
