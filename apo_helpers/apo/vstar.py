"""A*PO stage 1: the optimal value V*(x) of an instruction from samples of pi_ref (notebooks 00 and 03).

    V*(x) = beta1 * log( (1/N) * sum_i exp(r(x, y_i) / beta1) )

a soft maximum of the N sampled rewards: beta1 -> 0 gives the max, large beta1 the mean. Computed with the
log-sum-exp trick so small beta1 does not overflow.
"""

from __future__ import annotations

import numpy as np


def optimal_value(rewards, beta1: float = 0.5) -> float:
    """V* of one instruction from the rewards of its N samples (paper defaults: N = 8, beta1 = 0.5)."""
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 1 or r.size == 0:
        raise ValueError(f"rewards must be a non-empty 1-d sequence, got shape {r.shape}")
    if not beta1 > 0:
        raise ValueError(f"beta1 must be positive, got {beta1}")
    z = r / beta1
    top = z.max()
    return float(beta1 * (top + np.log(np.mean(np.exp(z - top)))))
