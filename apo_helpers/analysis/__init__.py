"""Evaluation, failure analysis, the episode viewer and plots (notebooks 01, 06, 07)."""
