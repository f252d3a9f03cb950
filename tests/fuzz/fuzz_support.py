"""How long the fuzz tests run: a bounded number of inputs per property.

``make test`` runs ``FUZZ_EXAMPLES`` inputs per property (default 300, a few seconds
each); a longer campaign sets it higher, e.g. ``FUZZ_EXAMPLES=20000``. BENCHMARKS.md
records the campaigns and what they found.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "300"))

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
