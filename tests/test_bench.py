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
