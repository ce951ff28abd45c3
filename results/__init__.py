"""The study scripts and their committed runs (results/README.md): importable as `from results import study`."""
