"""sbatch and squeue start without ``re`` (with the ``enum``, ``functools`` and
``collections`` it loads, 0.6× a bare interpreter's start: issue 51), so the shapes they
read on every run are read by plain functions. Each must accept exactly what its pattern
matched, and return what the pattern's code returned: checked here against the pattern,
on any text, from an alphabet of the characters where the two could part (digits of
other scripts, which ``\\d`` takes, a final newline, which ``$`` takes, the Kelvin sign,
which ``[K]`` takes in any case, other spaces)."""

from __future__ import annotations

import re

import hostlist
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hal.client.transport import _plain_url
from hal.compat import sbatch
from hal.compat.exports import _names_a_variable
from hal.compat.formats import Field, parse_format
from hal.compat.squeue import _is_job_id
from hal.core.errors import InvalidRequest
from hal.slurm.syntax import _UNIT_SHIFT, compress_hostlist, is_digits, is_plain_name, parse_memory
from hal.testing.examples import examples

# the TZ fixture of this folder is function-scoped; these tests read no clock
lenient = settings(
    suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=examples(400)
)
TRICKY = "0123456789٣５" + "aAzZ_bBkKmMgGtT\u212a" + ".-+=%#:/?@&,*|" + " \t\n\r\x0b\xa0\u2028"


def texts(extra: str = "", size: int = 12) -> st.SearchStrategy[str]:
    return st.text(alphabet=TRICKY + extra, max_size=size) | st.text(max_size=size)


@lenient
@given(texts())
def test_digits_as_the_integer_pattern(text: str) -> None:
    assert is_digits(text) == bool(re.match(r"^\d+$", text))


@lenient
@given(texts())
def test_plain_names_as_the_name_pattern(text: str) -> None:
    assert is_plain_name(text) == bool(re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", text))


def memory_by_pattern(text: str) -> int | None:
    """parse_memory as it was, on its pattern; None where that refused."""
    m = re.match(r"^(\d+)([KMGT]?)B?$", text.strip(), re.IGNORECASE)
    if not m:
        return None
    value = int(m.group(1)) << _UNIT_SHIFT[(m.group(2) or "M").upper()]
    return -(-value // (1 << 20)) * (1 << 20)


@lenient
@given(texts() | st.from_regex(r"\A\s*\d{1,6}[kmgtKMGT]?[bB]?\s*\Z"))
def test_memory_as_the_memory_pattern(text: str) -> None:
    if "\u212a" in text:  # the pattern took the Kelvin sign for K, then failed on it
        with pytest.raises(InvalidRequest):
            parse_memory(text)
        return
    expected = memory_by_pattern(text)
    if expected is None or expected >= 1 << 63:
        with pytest.raises(InvalidRequest):
            parse_memory(text)
    else:
        assert parse_memory(text) == expected


@lenient
@given(texts())
def test_variable_names_as_the_export_pattern(text: str) -> None:
    assert _names_a_variable(text) == bool(re.match(r"^[A-Za-z_][A-Za-z0-9_]*(=|$)", text))


@lenient
@given(texts() | st.from_regex(r"\A\d{1,4}([_+]\d{1,3})?\n?\Z"))
def test_job_ids_as_the_job_id_pattern(text: str) -> None:
    assert _is_job_id(text) == bool(re.match(r"^\d+([_+]\d+)?$", text))


def format_by_pattern(text: str) -> list[Field | str]:
    """parse_format as it was, on its pattern."""
    token = r"%(?P<dot>\.)?(?P<minus>-)?(?P<hash>#)?(?P<width>\d*)(?P<letter>[A-Za-z%])"
    parts: list[Field | str] = []
    pos = 0
    for m in re.finditer(token, text):
        if m.start() > pos:
            parts.append(text[pos : m.start()])
        pos = m.end()
        if m.group("letter") == "%":
            parts.append("%")
            continue
        parts.append(
            Field(
                letter=m.group("letter"),
                width=int(m.group("width") or 0),
                right=bool(m.group("dot")),
                auto=bool(m.group("hash")),
            )
        )
    if pos < len(text):
        parts.append(text[pos:])
    return parts


@lenient
@given(texts("%%%%.-#", size=24))
def test_formats_split_as_the_token_pattern(text: str) -> None:
    assert parse_format(text) == format_by_pattern(text)


@pytest.mark.parametrize(
    "text",
    ["%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R", "%i|%T", "%-10j%%%#5u", "%", "%.%i", "100%"],
)
def test_squeues_own_formats_split_as_the_token_pattern(text: str) -> None:
    assert parse_format(text) == format_by_pattern(text)


def url_by_pattern(url: str) -> tuple[str, str, str, str] | None:
    m = re.fullmatch(r"(https?)://([A-Za-z0-9.-]+)(?::([0-9]{1,5}))?(/[^?#]*)?", url)
    return None if m is None else (m[1], m[2], m[3] or "", m[4] or "")


@lenient
@given(st.sampled_from(["http://", "https://", "HTTP://", "http:/", ""]), texts("/://", size=20))
def test_plain_urls_as_the_url_pattern(scheme: str, rest: str) -> None:
    assert _plain_url(scheme + rest) == url_by_pattern(scheme + rest)


def directives_by_pattern(script: str) -> list[tuple[int, str]]:
    found = []
    for number, line in enumerate(script.splitlines(), start=1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break
        prefix = re.match(r"#SBATCH|#HAL(?=\s|$)", line)
        if prefix:
            found.append((number, line[prefix.end() :]))
    return found


@lenient
@given(st.lists(st.sampled_from(["#SBATCH", "#HAL", "#HALT", "#", " ", "\t", "-J x"]) | texts()))
def test_directives_found_as_the_directive_pattern(pieces: list[str]) -> None:
    script = "".join(pieces)
    assert sbatch.directive_lines(script) == directives_by_pattern(script)


@lenient
@given(texts())
def test_constraints_split_as_the_separator_pattern(text: str) -> None:
    if any(ch in text for ch in "|[]*()!"):
        return  # (refused before splitting)
    by_pattern = [f.strip() for f in re.split(r"[&,]", text) if f.strip()]
    if by_pattern:
        assert sbatch.parse_constraint(text) == by_pattern
    else:
        with pytest.raises(InvalidRequest):
            sbatch.parse_constraint(text)


@lenient
@given(texts("[]n"))
def test_one_node_is_listed_as_hostlist_lists_it(name: str) -> None:
    try:
        expected = hostlist.collect_hostlist([name])
    except AttributeError:  # hostlist's own failure on a line break inside a name
        assert "\n" in name.strip()
        assert compress_hostlist([name]) == name.strip()
        return
    except hostlist.BadHostlist:
        with pytest.raises(hostlist.BadHostlist):
            compress_hostlist([name])
        return
    assert compress_hostlist([name]) == expected
