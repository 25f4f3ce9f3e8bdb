"""The language-model side: prompts, models and batched multi-turn rollouts (notebook 02)."""
