"""Research helpers shared by the ablation scripts in ``scripts/`` (not used by the CLI)."""
