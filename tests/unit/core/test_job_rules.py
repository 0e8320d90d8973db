"""``--near``/``--apart`` syntax (``hal.core.job_rules``): what a rule means, how it is
shown again, and each malformed rule refused with what to write."""

from __future__ import annotations

import pytest

from hal.core.errors import InvalidRequest
from hal.core.job_rules import MAX_RULES, JobRule, check_consistent, parse_rule, parse_rules
from hal.testing import make_job


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("job:12", JobRule(job_id=12)),
        ("job:12@leaf", JobRule(job_id=12, level="leaf")),
        ("name:db@rack", JobRule(name="db", level="rack")),
        ("required=name:db", JobRule(name="db")),
        ("preferred=job:7@nvlink", JobRule(job_id=7, level="nvlink", required=False)),
        (
            " PREFERRED = name:a.b-c:d @ zone ",
            JobRule(name="a.b-c:d", level="zone", required=False),
        ),
    ],
)
def test_rules_parse_and_show_as_written_again(text: str, rule: JobRule) -> None:
    assert parse_rule(text, "near") == rule
    assert parse_rule(str(rule), "near") == rule


def test_required_is_the_default_and_shown_without_its_word() -> None:
    assert str(parse_rule("required=job:3@leaf", "near")) == "job:3@leaf"
    assert str(parse_rule("preferred=job:3", "near")) == "preferred=job:3@node"


def test_several_rules_comma_separated_or_repeated_add_up_once_each() -> None:
    rules = parse_rules(["job:1,name:db@leaf", "job:1", ""], "apart")
    assert rules == (JobRule(job_id=1), JobRule(name="db", level="leaf"))


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("12", "the target is job:ID or name:NAME"),
        ("host:n1", "the target is job:ID or name:NAME"),
        ("job:", "nothing after job:"),
        ("name:", "nothing after name:"),
        ("job:abc", "job id 'abc' is not a job id"),
        ("job:0", "job id '0' is not a job id"),
        ("job:-3", "job id '-3' is not a job id"),
        ("job:99999999999999999999", "is not a job id"),
        ("job:12@", "nothing after @"),
        ("job:12@le af", "'le af' is not a level name"),
        ("job:12@a@b", "'a@b' is not a level name"),
        ("name:my job", "job name 'my job' has blanks"),
        ("sometimes=job:12", "the target is job:ID or name:NAME"),
    ],
)
def test_a_malformed_rule_is_refused_with_what_to_write(text: str, says: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_rules([text], "near")
    assert says in err.value.message
    assert "e.g. --near=job:123@node" in err.value.message
    assert err.value.field == "near"


def test_more_rules_than_a_job_takes_are_refused() -> None:
    many = ",".join(f"job:{i}" for i in range(1, MAX_RULES + 2))
    with pytest.raises(InvalidRequest, match=f"at most {MAX_RULES}"):
        parse_rules([many], "apart")


def test_near_and_apart_the_same_target_at_the_same_level_is_refused() -> None:
    near, apart = parse_rules(["job:5@leaf"], "near"), parse_rules(["job:5@leaf"], "apart")
    with pytest.raises(InvalidRequest, match="no node is both"):
        check_consistent(near, apart)
    check_consistent(near, parse_rules(["job:5@node"], "apart"))  # another node of its leaf
    check_consistent(near, parse_rules(["preferred=job:5@leaf"], "apart"))


def test_what_a_rule_names() -> None:
    rule = JobRule(job_id=20)
    assert rule.names(make_job(20).build(), "alice")
    assert rule.names(make_job(23).array(20, 3).build(), "alice")  # an element of array 20
    assert rule.names(make_job(21).het(20, 1, 2).build(), "alice")  # component of het 20
    assert not rule.names(make_job(21).build(), "alice")
    by_name = JobRule(name="db")
    assert by_name.names(make_job(1).name("db").build(), "alice")
    assert not by_name.names(make_job(1).name("db").user("bob").build(), "alice")
    assert by_name.names_itself(make_job(1).name("db").build())
