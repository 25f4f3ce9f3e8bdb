"""The rollout benchmark on the ci profile's untrained model: what it reports, not how fast it is."""

from apo_helpers.bench import bench_rollout


def test_bench_rollout_reports_the_prefill_of_every_turn():
    result = bench_rollout(batch=2, repeats=1)
    assert result["generated_tokens"]["batched"] == result["generated_tokens"]["sequential"] > 0
    assert result["turns"] >= 2 and result["prompt_tokens"] > result["turns"] * 20  # every turn's prompt is read
    for mode in ("batched", "sequential"):
        assert 0 < result["prefill_seconds_median"][mode] < result["seconds_median"][mode] * 2
    bound = result["seconds_median"]["sequential"] / result["prefill_seconds_median"]["batched"]
    assert abs(result["speedup_bound_from_prefill"] - bound) < 0.01 * bound + 0.01
