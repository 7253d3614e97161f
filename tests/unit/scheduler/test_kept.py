"""Counting what came and went between two cycles (``kept``): items by the key that names
them, the items gone and come between two such maps, and counts brought up to date from the
last ones (``recounted``) that are those counted afresh."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from gpupool.scheduler.kept import ALLOCATION_KEY, by_key, changes, recounted
from gpupool.scheduler.types import Allocation
from tests.support.scheduling import running
from tests.unit.scheduler.test_policy_properties import SETTINGS


def team_gpus(item: Allocation) -> tuple[str | None, int]:
    """What ``recounted`` counts in these tests: the GPUs each team holds (none: not counted)."""
    return (item.team or None, len(item.gpus))


def fresh_counts(items: list[Allocation]) -> Counter:
    counts: Counter = Counter()
    for item in items:
        team, gpus = team_gpus(item)
        if team is not None:
            counts[team] += gpus
    return +counts  # no zero entries


# -- items by key, and what came and went ----------------------------------------------------------


def test_an_allocation_is_named_by_its_job_and_task():
    assert ALLOCATION_KEY(running(7, "node-a", task=2)) == (7, 2)


def test_items_by_key_keep_the_last_of_a_repeated_key():
    first, other_task = running(1, "node-a"), running(1, "node-a", task=1)
    again = running(1, "node-b")

    keyed = by_key([first, other_task, again], ALLOCATION_KEY)

    assert keyed == {(1, 0): again, (1, 1): other_task}
    assert keyed[(1, 0)] is again


def test_changes_are_the_items_gone_and_come_by_key():
    one, two, three = running(1, "node-a"), running(2, "node-a"), running(3, "node-a")
    known = by_key([one, two], ALLOCATION_KEY)

    gone, come = changes(known, by_key([two, three], ALLOCATION_KEY))

    assert (gone, come) == ([one], [three])
    assert changes(known, known) == ([], [])


def test_another_object_under_a_known_key_is_gone_and_come_even_when_equal():
    """The state keeps what it worked out of an object with that object: an equal one read
    anew is worked out again."""
    one = running(1, "node-a")
    equal = replace(one)
    stopping = replace(one, stopping=True)
    known = {ALLOCATION_KEY(one): one}

    assert changes(known, {ALLOCATION_KEY(equal): equal}) == ([one], [equal])
    assert changes(known, {ALLOCATION_KEY(stopping): stopping}) == ([one], [stopping])


# -- counts brought up to date ---------------------------------------------------------------------


def test_the_first_count_is_made_afresh_and_kept_with_the_items_by_key():
    items = [running(1, "node-a", [0, 1], team="a"), running(2, "node-a", team="b")]

    kept, counts = recounted(None, items, ALLOCATION_KEY, team_gpus)

    assert counts == Counter({"a": 2, "b": 1})
    assert kept == (by_key(items, ALLOCATION_KEY), counts)


def test_items_weighed_to_no_key_are_not_counted():
    items = [running(1, "node-a", team=""), running(2, "node-a", team="b")]

    _, counts = recounted(None, items, ALLOCATION_KEY, team_gpus)

    assert counts == Counter({"b": 1})


def test_a_recount_weighs_only_the_items_gone_and_come():
    items = [running(job, "node-a", [job % 8], team="ab"[job % 2]) for job in range(10)]
    kept, _ = recounted(None, items, ALLOCATION_KEY, team_gpus)
    weighed: list[int] = []

    def counting(item: Allocation) -> tuple[str | None, int]:
        weighed.append(item.job_id)
        return team_gpus(item)

    later = [*items[1:], running(10, "node-b", [0, 1], team="a")]
    kept, counts = recounted(kept, later, ALLOCATION_KEY, counting)

    assert sorted(weighed) == [0, 10]
    assert counts == Counter({"a": 6, "b": 5})


def test_a_recount_where_as_many_came_and_went_as_there_are_items_counts_afresh():
    items = [running(job, "node-a", team="a") for job in range(3)]
    kept, _ = recounted(None, items, ALLOCATION_KEY, team_gpus)
    weighed: list[int] = []

    def counting(item: Allocation) -> tuple[str | None, int]:
        weighed.append(item.job_id)
        return team_gpus(item)

    others = [running(job, "node-a", team="b") for job in range(3, 5)]  # 3 gone, 2 come
    _, counts = recounted(kept, others, ALLOCATION_KEY, counting)

    assert sorted(weighed) == [3, 4]  # each item once: no item gone is weighed
    assert counts == Counter({"b": 2})


def test_a_recount_leaves_the_last_counts_as_they_were():
    items = [running(1, "node-a", team="a"), running(2, "node-a", team="a")]
    kept, first = recounted(None, items, ALLOCATION_KEY, team_gpus)

    recounted(kept, [*items, running(3, "node-a", team="a")], ALLOCATION_KEY, team_gpus)

    assert first == Counter({"a": 2})


def test_a_team_that_holds_nothing_any_more_has_no_count_left():
    items = [running(job, "node-a", team="a") for job in range(3)] + [running(9, "node-b")]
    kept, _ = recounted(None, items, ALLOCATION_KEY, team_gpus)

    _, counts = recounted(kept, items[:3], ALLOCATION_KEY, team_gpus)

    assert "b" not in counts
    assert counts == Counter({"a": 3})


def test_repeated_keys_are_counted_afresh_and_nothing_is_kept_for_the_next_call():
    twice = [running(1, "node-a", team="a"), running(1, "node-b", team="a")]
    kept, _ = recounted(None, [running(2, "node-a", team="a")], ALLOCATION_KEY, team_gpus)

    again, counts = recounted(kept, twice, ALLOCATION_KEY, team_gpus)

    assert again is None
    assert counts == Counter({"a": 2})


@SETTINGS
@given(
    st.lists(
        st.tuples(
            st.lists(
                st.tuples(
                    st.integers(0, 12),
                    st.sampled_from(["", "a", "b"]),
                    st.integers(1, 3),
                    st.booleans(),
                ),
                max_size=4,
            ),
            st.booleans(),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_counts_brought_up_to_date_are_those_counted_afresh(calls):
    """Twelve jobs at most, a few come, gone or changed at each call (a job drawn as before:
    the same object; with another team or GPUs: another object under its key), and now and
    then one item twice (a key repeated): the counts brought up to date from the last call's
    are those counted afresh, with no zero entry."""
    made: dict[tuple[int, str, int], Allocation] = {}
    present: dict[int, Allocation] = {}
    kept = None
    for edits, twice in calls:
        for job, team, gpus, ends in edits:
            if ends:
                present.pop(job, None)
            else:
                drawn = (job, team, gpus)
                present[job] = made.setdefault(
                    drawn, running(job, "node-a", range(gpus), team=team)
                )
        items = list(present.values())
        if twice and items:
            items.append(items[0])
        kept, counts = recounted(kept, items, ALLOCATION_KEY, team_gpus)
        assert counts == fresh_counts(items)
        assert all(counts.values())
