"""JSON encoding for stored columns: compact, never failing on the event hot path."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import TypeAlias

import msgspec

JSONValue: TypeAlias = str | int | float | bool | list["JSONValue"] | dict[str, "JSONValue"] | None


def _lenient(value: object) -> object:
    """What msgspec cannot encode: mappings of any kind become objects, sets sorted arrays,
    anything else its ``repr``."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    return repr(value)


# msgspec, not json: about a tenth of the cost per event (0.1 vs 1.4 us), and this runs on the
# store writer's thread, where every microsecond under the GIL is taken from the serving
# thread. It writes non-finite floats as null, as JSON must.
_encode = msgspec.json.Encoder(enc_hook=_lenient).encode


def _whole_characters(text: str) -> str:
    """``text`` with each surrogate that pairs with no other replaced by U+FFFD (a cut
    emoji, say: UTF-8 has no encoding for it, and a JSON column refuses its escape)."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _finite(value: object) -> object:
    """A copy of ``value`` with NaN and infinities replaced by ``null`` (JSON has neither),
    and unpaired surrogates in strings by U+FFFD."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return _whole_characters(value)
    if isinstance(value, Mapping):
        return {_whole_characters(str(k)): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def dumps(value: object) -> str:
    """Encode ``value`` as compact JSON text.

    Mappings of any kind (``MappingProxyType`` included) become objects. Non-finite floats
    become ``null``, unknown objects their ``repr`` and unpaired surrogates U+FFFD, so one odd
    value never fails a batch.
    """
    try:
        return _encode(value).decode()
    except (ValueError, TypeError, OverflowError, msgspec.EncodeError):
        # e.g. an int beyond 64 bits, a non-string key msgspec will not coerce, or a string
        # with an unpaired surrogate (a UnicodeEncodeError)
        return json.dumps(_finite(value), default=_lenient, separators=(",", ":"))


#: a surrogate in JSON text, as a character or as an escape (paired or not: a pair is rare
#: enough that re-encoding it too costs nothing worth a stricter pattern)
_SURROGATE = re.compile(r"[\ud800-\udfff]|\\u[dD][89a-fA-F]")


def storable(text: str) -> str:
    """JSON text given by a caller as a JSON column takes it: unchanged, unless it holds a
    surrogate (an unpaired one, which Python's ``json`` reads and writes but the column
    refuses, becomes U+FFFD). ``ValueError`` when ``text`` is not JSON."""
    value = json.loads(text)
    return text if _SURROGATE.search(text) is None else dumps(value)


def loads_object(text: str | None) -> dict[str, JSONValue]:
    """Decode a stored JSON object; ``None`` or a non-object decodes to an empty dict."""
    if text is None:
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {}
