"""``json.dumps`` and ``json.loads`` through ``_json``, the C half of the ``json`` package,
for the commands that start once per job (``sbatch``, ``squeue``: issue 51).

``import json`` loads ``re`` for a few patterns of its pure-Python half, and ``re`` loads
``enum``, ``functools`` and ``collections``: together about 0.8× a bare interpreter's
start, three times the commands' request. The C encoder and scanner that ``json`` itself
runs need none of them. What these functions return is what ``json`` returns for the
same arguments, byte for byte; wherever the C half is not the whole story (a document
that fails to parse, bytes that are not UTF-8 without a BOM, a Python without
``_json``), they hand the call to ``json``, so its errors are its own.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_json: Any
try:
    import _json
except ImportError:  # (an interpreter without the accelerator: json's own code)
    _json = None

_WHITESPACE = " \t\n\r"  # json.decoder.WHITESPACE
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


def _not_serializable(value: object) -> Any:
    """``json.JSONEncoder.default``'s refusal, word for word."""
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def dumps(value: object, *, compact: bool = False) -> str:
    """``json.dumps(value)``; ``compact``: ``json.dumps(value, separators=(",", ":"))``."""
    encode = _encoder(compact)
    if encode is None:
        import json

        return json.dumps(value, separators=(",", ":") if compact else None)
    return "".join(encode(value, 0))


def _encoder(compact: bool) -> Callable[[object, int], list[str]] | None:
    """``_json``'s encoder as ``json.dumps`` makes it; None without ``_json`` or where
    its signature is not the one known here (a later Python), so ``json`` does it."""
    if _json is None:
        return None
    try:
        encoder: Callable[[object, int], list[str]] = _json.make_encoder(
            {},  # markers: check_circular
            _not_serializable,
            _json.encode_basestring_ascii,  # ensure_ascii
            None,  # indent
            ":" if compact else ": ",
            "," if compact else ", ",
            False,  # sort_keys
            False,  # skipkeys
            True,  # allow_nan
        )
    except TypeError:
        return None
    return encoder


class _Scanner:
    """The attributes ``_json.make_scanner`` reads off a ``json.JSONDecoder``."""

    __slots__ = (
        "object_hook",
        "object_pairs_hook",
        "parse_constant",
        "parse_float",
        "parse_int",
        "strict",
    )

    def __init__(self, object_hook: Callable[[dict[str, Any]], Any] | None) -> None:
        self.object_hook = object_hook
        self.object_pairs_hook = None
        self.parse_float = float
        self.parse_int = int
        self.parse_constant = _CONSTANTS.__getitem__
        self.strict = True


def loads(
    document: str | bytes, *, object_hook: Callable[[dict[str, Any]], Any] | None = None
) -> Any:
    """``json.loads(document, object_hook=object_hook)``."""
    text = _text(document)
    if text is not None and _json is not None:
        start = len(text) - len(text.lstrip(_WHITESPACE))
        try:
            value, end = _json.make_scanner(_Scanner(object_hook))(text, start)
        except StopIteration:  # no value where one begins: json's "Expecting value"
            pass
        except (TypeError, AttributeError):  # a scanner that wants more (a later Python)
            pass
        else:
            if not text[end:].strip(_WHITESPACE):
                return value
    import json

    return json.loads(document, object_hook=object_hook)


def _text(document: str | bytes) -> str | None:
    """``document`` as ``json.loads`` reads it where that is plain UTF-8; None where json
    must look (a BOM, NUL bytes that mark UTF-16 or UTF-32, a type it refuses)."""
    if isinstance(document, str):
        return document
    if not isinstance(document, bytes) or b"\x00" in document[:4]:
        return None
    if document.startswith((b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")):
        return None
    try:
        return document.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None
