"""The H200 scripts (study/cuda/run.sh, rung.sh, stack_check.py)."""
