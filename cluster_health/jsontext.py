"""JSON text on the server's hot paths: orjson where it reads or writes a value as the standard library would,
the standard library for the rest.

A 1,024-node round moves about 1,000 halves of 1.6 KB through the ingest consumer: each is
read from its task message (two JSON documents), and written into the pair table inside one
JSON document per statement (bulk.py). With the standard library those passes took about a
third of the consumer's CPU (py-spy, docs/BENCHMARKS.md); orjson does them several times faster.

What orjson refuses, the standard library still does, so nothing is read or written differently
from before: ``NaN`` and ``Infinity`` literals, a lone surrogate escape, a number past a double
(which the contract then refuses with its own message), a string that is no valid Unicode on the
way out (which PostgreSQL then refuses, and the batch falls back to one half at a time). orjson
reads an integer past 64 bits as a float where json reads it exactly, so a text with a run of 20
digits or more is read by json (bytes.translate finds one in about a microsecond a half).
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import TextField
from django.db.models.functions import Cast

_OPTIONS = orjson.OPT_NON_STR_KEYS  # an int key written as a string, as json.dumps writes it
_django = DjangoJSONEncoder()
# Any integer past 64 bits has 20 digits or more (the largest 19-digit one fits an unsigned 64-bit integer):
# every digit made "0" and everything else a space, such a run is 20 zeros in a row.
_DIGITS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_RUN = b"0" * 20


def _long_number(raw: bytes | str) -> bool:
    data = raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogatepass")
    return _LONG_RUN in data.translate(_DIGITS)


def loads(raw: bytes | str) -> Any:
    """The value of a JSON text; raises ValueError (json.JSONDecodeError) as json.loads does."""
    if not _long_number(raw):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(raw)


def _default(value: Any) -> Any:
    # What orjson has no type for (Decimal, timedelta, lazy text): as Django's encoder writes it.
    return _django.default(value)


def dumps(value: Any) -> str:
    """Compact JSON text of ``value``; dates and times in ISO 8601 with their microseconds, the rest as
    DjangoJSONEncoder writes it. A value orjson cannot write (a lone surrogate, an int past 64 bits) is
    written by the standard library."""
    try:
        return orjson.dumps(value, default=_default, option=_OPTIONS).decode()
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return json.dumps(value, cls=DjangoJSONEncoder)


def column(name: str) -> Cast:
    """A JSON column read as its text, for ``value_of``: Django's JSONField decodes every value it reads with
    the standard library, a third of the time a sweep's findings took to read (two JSON columns a pair row;
    cProfile of a 256-node sweep's close, docs/BENCHMARKS.md)."""
    return Cast(name, output_field=TextField())


def value_of(text: str | None) -> Any:
    """The value of a JSON column read with ``column``: None for SQL NULL, as the field gives it."""
    return None if text is None else loads(text)
