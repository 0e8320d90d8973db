"""``hal.client.cjson`` is ``json.dumps``/``json.loads`` without the ``json`` package (whose
``re`` costs sbatch and squeue 0.8× a bare interpreter's start): the same text out, the
same values in, the same errors, for any input."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hal.client import cjson

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
keys = st.text() | st.integers() | st.booleans() | st.none() | st.floats()
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.tuples(inner, inner)
        | st.dictionaries(keys, inner, max_size=5)
    ),
    max_leaves=30,
)


def outcome(call: Any, *args: Any, **kwargs: Any) -> tuple[str, str]:
    """What a call gives: its value as json writes it (NaN equals NaN there), or its
    error's type and message."""
    try:
        return "value", json.dumps(call(*args, **kwargs))
    except Exception as err:
        return type(err).__name__, str(err)


@given(values)
def test_dumps_writes_what_json_writes(value: object) -> None:
    assert cjson.dumps(value) == json.dumps(value)
    assert cjson.dumps(value, compact=True) == json.dumps(value, separators=(",", ":"))


@pytest.mark.parametrize("value", [{1, 2}, {"a": b"x"}, [object()], {("a",): 1}])
def test_dumps_refuses_what_json_refuses(value: object) -> None:
    assert outcome(cjson.dumps, value) == outcome(json.dumps, value)


@given(values)
def test_loads_reads_what_json_reads(value: object) -> None:
    for text in (json.dumps(value), json.dumps(value, indent=1), f" \n{json.dumps(value)}\r\t"):
        assert outcome(cjson.loads, text) == outcome(json.loads, text)
        encoded = text.encode()
        assert outcome(cjson.loads, encoded) == outcome(json.loads, encoded)


@given(st.text(alphabet='{}[]":,0123456789.eE+-tfnrulasNIy \t\n\r\\\ufeffé', max_size=30))
def test_loads_fails_where_json_fails_and_alike(text: str) -> None:
    assert outcome(cjson.loads, text) == outcome(json.loads, text)


@pytest.mark.parametrize(
    "document",
    [
        b"",
        b'{"a": 1}',
        '\ufeff{"a": 1}'.encode(),  # a UTF-8 BOM: json reads it as utf-8-sig
        '{"a": "é"}'.encode("utf-16"),
        '{"a": "é"}'.encode("utf-16-le"),
        '{"a": "é"}'.encode("utf-32-be"),
        b'{"a": "\xff"}',  # not UTF-8
        b'"\xed\xa0\x80"',  # a lone surrogate, which json lets through (surrogatepass)
        b"[1] x",
        b"  ",
        bytearray(b"[1]"),
    ],
)
def test_loads_reads_bytes_as_json_does(document: bytes) -> None:
    assert outcome(cjson.loads, document) == outcome(json.loads, document)


def test_object_hook_is_called_as_json_calls_it() -> None:
    text = '{"a": {"b": [1, {"c": null}]}, "d": 2}'
    seen: list[dict[str, Any]] = []

    def hook(fields: dict[str, Any]) -> Any:
        seen.append(dict(fields))
        return ("object", sorted(fields))

    ours = cjson.loads(text, object_hook=hook)
    ours_seen, seen[:] = list(seen), []
    assert ours == json.loads(text, object_hook=hook)
    assert ours_seen == seen


def test_neither_json_nor_re_is_imported_where_the_documents_parse() -> None:
    probe = (
        "import sys\n"
        "from hal.client import cjson\n"
        "assert cjson.loads(cjson.dumps({'a': [1.5, None, 'é']})) == {'a': [1.5, None, 'é']}\n"
        "assert cjson.loads(b' [NaN] ')[0] != 0\n"
        "print(sorted(m for m in ('json', 're', 'enum') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout == "[]\n"
