"""The rollout benchmark on the ci profile's untrained model: what it reports, not how fast it is."""

from apo_helpers.bench import bench_rollout


def test_bench_rollout_reports_the_prefill_of_every_turn():
    result = bench_rollout(batch=2, repeats=1)
    assert result["generated_tokens"]["batched"] == result["generated_tokens"]["sequential"] > 0
    assert result["turns"] >= 2 and result["prompt_tokens"] > result["turns"] * 20  # every turn's prompt is read
    for mode in ("batched", "sequential"):
        assert 0 < result["prefill_seconds_median"][mode] < result["seconds_median"][mode] * 2
    # the bound is computed before the seconds are rounded to milliseconds (the ci model's prefill takes a few)
    sequential, prefill = result["seconds_median"]["sequential"], result["prefill_seconds_median"]["batched"]
    low, high = (sequential - 5e-4) / (prefill + 5e-4), (sequential + 5e-4) / max(prefill - 5e-4, 1e-9)
    assert low - 0.01 <= result["speedup_bound_from_prefill"] <= high + 0.01


def test_bench_train_save_records_the_machine_and_a_tag_gives_its_own_file(tmp_path, monkeypatch):
    import json

    import pytest

    import apo_helpers.__main__ as cli
    from apo_helpers import bench
    from apo_helpers.analysis.readme import bench_machine, bench_train_table
    from apo_helpers.config import numerics

    monkeypatch.setattr(cli, "RESULTS_DIR", tmp_path)
    measured = {"batch_goals": 32, "device": "cpu", "torch_threads": 2, "seconds_median": 5.5,
                "rollout_seconds_median": 2.0, "policy_forward_seconds_median": 1.0, "ref_seconds_median": 1.0,
                "update_seconds_median": 1.5, "target_seconds": 6.0}
    monkeypatch.setattr(bench, "bench_train", lambda *args, **kwargs: dict(measured))
    assert cli.main(["bench", "train", "--save", "--tag", "epyc-avx2"]) == 0
    saved = json.loads((tmp_path / "bench_train_epyc-avx2.json").read_text())
    here = numerics()
    assert saved["numerics"]["processor"] == here["processor"]
    assert bench_machine(saved) == f"{here['processor']} ({here['cpu_capability']})"
    assert f"| cpu | {bench_machine(saved)} | 2 | 5.50 |" in bench_train_table(tmp_path)
    assert not (tmp_path / "bench_train.json").exists()  # the untagged row stays as it was
    with pytest.raises(SystemExit, match="only `bench train` takes a tag"):
        cli.main(["bench", "rollout", "--tag", "x"])
    with pytest.raises(SystemExit, match="letters, digits"):
        cli.main(["bench", "train", "--tag", "../elsewhere"])


def test_bench_update_memory_compares_the_whole_and_the_lean_backward(ci_ref_dir):
    """More episodes, more scored tokens; both paths measured; the lean path's peak does not grow with the batch as
    the whole one's does (the ci model: a few MiB per micro-batch against hundreds for the batch)."""
    from apo_helpers.bench import bench_update_memory

    result = bench_update_memory(str(ci_ref_dir), batches=(2, 8), repeats=1)
    small, large = result["rows"]
    assert (small["episodes"], large["episodes"]) == (2, 8) and large["scored_tokens"] > small["scored_tokens"] > 0
    assert large["whole_peak_mb_median"] > small["whole_peak_mb_median"] > 0
    assert large["whole_peak_mb_median"] > large["lean_peak_mb_median"]
    assert result["whole_mb_per_1k_tokens"] > 0


def test_bench_update_memory_save_renders_the_readme_rows(tmp_path, monkeypatch):
    import json

    import apo_helpers.__main__ as cli
    from apo_helpers import bench
    from apo_helpers.analysis.readme import bench_update_memory_table

    monkeypatch.setattr(cli, "RESULTS_DIR", tmp_path)
    rows = [{"episodes": 32, "turns": 120, "scored_tokens": 40000, "whole_peak_mb_median": 2000.0,
             "whole_seconds_median": 2.0, "lean_peak_mb_median": 400.0, "lean_seconds_median": 2.5,
             "peak_ratio": 5.0, "seconds_ratio": 1.25}]
    measured = {"profile": "class", "model": "runs/pi_ref_class", "device": "cpu", "parameters": 2_300_000,
                "micro_batch": 48, "torch_threads": 2, "rows": rows, "whole_mb_per_1k_tokens": None}
    monkeypatch.setattr(bench, "bench_update_memory", lambda *args, **kwargs: dict(measured))
    assert cli.main(["bench", "update-memory", "--save", "--json"]) == 0
    saved = json.loads((tmp_path / "bench_update_memory.json").read_text())
    assert saved["rows"] == rows and "processor" in saved["numerics"]
    assert "| pi_ref_class (2.3M) |" in bench_update_memory_table(tmp_path)
    assert "| 32 | 120 | 40,000 | 2,000 | 400 | 5.0x | 2.00 / 2.50 |" in bench_update_memory_table(tmp_path)
