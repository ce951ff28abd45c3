"""The H200 scripts (results/cuda/run.sh, rung.sh, stack_check.py)."""
