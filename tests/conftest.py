import os

from hypothesis import HealthCheck, settings

# Property tests run on a 2-core CI machine: no per-example deadline, a fixed
# number of examples, and derandomised so a failure reproduces.
settings.register_profile(
    "ci",
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Tests never pick a GPU by accident: they ask for one explicitly when they want it.
os.environ.setdefault("AMP_LAB_DEVICE", "cpu")
os.environ.setdefault("AMP_LAB_PROGRESS", "0")
