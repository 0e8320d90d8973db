"""Benchmarks behind ``hal bench``: each writes one JSON object with its figures and the
peer it was compared with in the same run. ``make bench`` runs them all (bench/run_all.py).
Never used by tests: wall-clock numbers belong here, not in assertions."""
