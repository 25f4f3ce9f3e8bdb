"""The algorithms: imitation warm start, A*PO stage 1 (V*) and stage 2, the baselines (notebooks 02-05)."""
