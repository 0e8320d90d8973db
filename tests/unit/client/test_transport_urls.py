"""The client reads its server URL and writes query values and path segments without
importing ``urllib.parse`` where it can (a fifth of a bare interpreter's start, paid by
every ``sbatch``): what it reads and writes must be what urllib.parse would."""

from __future__ import annotations

from urllib.parse import quote, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hal.client.transport import percent_encoded, split_url


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8470",
        "http://localhost:8470/",
        "https://HAL.Example.org/prefix/v",
        "http://head-1.cluster:80/hal/",
        "http://h:0",
        "http://h:08470",
        "http://[::1]:8470",  # (urllib.parse's: brackets)
        "http://user:pw@h:1",
        "http://h:1/p?x=1#f",
        "HTTP://H:1",
        "http://my_host:1",
        "http://:8470",
        "http://h:",
        "ftp://h:1",
        "h:8470",
        " http://h:1",
    ],
)
def test_urls_are_read_as_urlsplit_reads_them(url: str) -> None:
    parts = urlsplit(url)
    assert split_url(url) == (parts.scheme, parts.hostname, parts.port, parts.path)


@pytest.mark.parametrize("url", ["http://h:99999", "http://h:65536/", "http://h:x1", "http://[::1"])
def test_a_bad_port_or_host_is_urlsplits_value_error(url: str) -> None:
    with pytest.raises(ValueError) as ours:
        split_url(url)
    with pytest.raises(ValueError) as theirs:
        urlsplit(url).port  # noqa: B018
    assert str(ours.value) == str(theirs.value)


@given(st.text())
def test_values_are_percent_encoded_as_quote_does(text: str) -> None:
    try:
        expected = quote(text, safe="")
    except UnicodeEncodeError:  # a lone surrogate: no UTF-8 for it either way
        with pytest.raises(UnicodeEncodeError):
            percent_encoded(text)
        return
    assert percent_encoded(text) == expected
