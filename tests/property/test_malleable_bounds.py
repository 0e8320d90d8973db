"""Whatever the jobs, their rates and the CPUs free, the malleable controller never
resizes a job outside its declared range or above its quota, never plans more CPUs
than were free plus those the resized jobs held, and never touches a job resized
within the interval (unless a lowered quota forces it down)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hal.core.malleable import Candidate, Policy, plan_resizes
from hal.testing.examples import examples

NOW = 100_000.0
POLICY = Policy(min_gain=0.1, min_interval_s=600.0)


@st.composite
def candidates(draw: st.DrawFn) -> list[Candidate]:
    count = draw(st.integers(1, 8))
    jobs = []
    for job_id in range(1, count + 1):
        low = draw(st.integers(1, 6))
        high = draw(st.integers(low, 16))
        cap = draw(st.sampled_from([0, 0, *range(1, 17)]))
        waiting = draw(st.booleans()) and draw(st.booleans())
        size = 0 if waiting else draw(st.integers(low, high))
        seen = draw(st.lists(st.integers(1, 16), max_size=4))
        rates = {n: draw(st.floats(0.1, 1000.0)) for n in {*seen, *([size] if size else [])}}
        if draw(st.booleans()):
            rates.pop(size, None)  # nothing reported at its size yet
        since = NOW - draw(st.sampled_from([0.0, 30.0, 599.0, 600.0, 5000.0]))
        cpus = draw(st.integers(1, 64))
        priority = draw(st.integers(0, 1000))
        jobs.append(Candidate(job_id, size, low, high, cpus, rates, since, priority, cap))
    return jobs


@settings(max_examples=examples(200), deadline=None)
@given(jobs=candidates(), free=st.integers(0, 2000))
def test_resizes_stay_in_range_quota_and_budget(jobs: list[Candidate], free: int) -> None:
    plan = plan_resizes(jobs, free, NOW, POLICY)
    by_id = {c.job_id: c for c in jobs}
    assert len({r.job_id for r in plan}) == len(plan)
    freed = 0
    for r in plan:
        c = by_id[r.job_id]
        assert r.old == c.size and r.new != r.old
        assert r.new <= c.high and r.new <= c.top
        assert r.new >= min(c.low, c.top)
        forced = c.size > c.top
        if c.size > 0 and not forced:
            assert NOW - c.last_change >= POLICY.min_interval_s  # the interval held
            assert c.size in c.rates  # it reported at its size
        freed += (r.old - r.new) * c.cpus_per_unit
    # CPUs: what grows (waiting jobs included) fits in what was free plus what shrank
    assert freed + free >= 0
