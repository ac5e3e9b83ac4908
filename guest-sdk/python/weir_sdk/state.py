"""Keyed state: what the SDK checkpoints. A state object keeps each key's state and
the keys changed since the last snapshot round; the SDK's glue (operator.py) asks it
for a round's keys, encodes them into chunks and hands restored entries back. Values
are JSON by default: what a key holds must come back from JSON as it went in."""

import json
import math
from typing import (Any, Callable, Dict, Generic, Iterator, List, Optional, Set, Tuple,
                    TypeVar)

from .errors import StateError

V = TypeVar("V")
Key = Optional[bytes]
Upgrade = Optional[Callable[[Any], Any]]

_MISSING: Any = object()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
# The decoder's scanner alone: a third of `decode`'s time on a small value, which
# matters when a restore chunk holds 100,000 totals.
_SCAN = json.JSONDecoder(parse_constant=_reject_constant).scan_once


def encode_json(value: Any) -> bytes:
    """`value` as compact JSON (NaN and infinities refused); a number as `json.dumps`
    prints it, without its encoder's set-up per call."""
    kind = type(value)
    if kind is int:
        return int.__repr__(value).encode()
    if kind is float and math.isfinite(value):
        return float.__repr__(value).encode()
    return _ENCODER.encode(value).encode("ascii")


def decode_json(body: bytes) -> Any:
    """The JSON value `body` holds, nothing before or after it; ValueError if none."""
    text = body.decode("utf-8")
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        raise ValueError("it is not JSON") from None
    if end != len(text):
        raise ValueError(f"it holds {len(text) - end} bytes after its JSON value")
    return value


class StateStore:
    """The protocol between a state object and the SDK's snapshot and restore. A key's
    body is whatever the state encodes for it (the SDK adds the version byte)."""

    _name = "state"

    def _take_round(self) -> List[bytes]:
        """The keys changed since the last round, each once, sorted; tracks afresh."""
        raise NotImplementedError

    def _encode(self, key: bytes) -> Optional[bytes]:
        """`key`'s body now, or None: it holds no state any more (a removal)."""
        raise NotImplementedError

    def _restore(self, key: bytes, body: bytes, upgrade: Upgrade) -> None:
        """Adds `key`'s restored body (not a change): StateError if the state holds
        `key` already, ValueError if `body` is not one. `upgrade` converts each value
        of an older state version."""
        raise NotImplementedError

    def _restored(self, watermark: int) -> None:
        """The restore is complete at event time `watermark`."""

    def _keys(self) -> int:
        raise NotImplementedError


class KeyedState(StateStore, Generic[V]):
    """A dict of one value per state key that records which keys change.

    Keys are bytes; None (a record without a key) means the empty key b"", as the host
    routes it. Setting or deleting a key marks it changed, and the next checkpoint
    writes only the changed keys. A value changed in place (a list appended to) is not
    seen: assign it again, or call `touch(key)`. Values are JSON values by default
    (numbers, strings, lists, dicts with string keys, bools, None); pass `encode` and
    `decode` for others. `check` refuses a restored value it returns False for, and
    `name` names the values in messages ("is not a version 1 total").
    """

    def __init__(self, name: str = "state", *, check: Optional[Callable[[Any], bool]] = None,
                 encode: Callable[[V], bytes] = encode_json,
                 decode: Callable[[bytes], V] = decode_json) -> None:
        self._name = name
        self._check = check
        self._encode_value = encode
        self._decode_value = decode
        self._values: Dict[bytes, V] = {}
        self._changed: Set[bytes] = set()

    def __getitem__(self, key: Key) -> V:
        return self._values[b"" if key is None else key]

    def get(self, key: Key, default: Any = None) -> Any:
        """`key`'s value, or `default` if it has none."""
        return self._values.get(b"" if key is None else key, default)

    def __setitem__(self, key: Key, value: V) -> None:
        key = b"" if key is None else key
        self._values[key] = value
        self._changed.add(key)

    def __delitem__(self, key: Key) -> None:
        key = b"" if key is None else key
        del self._values[key]
        self._changed.add(key)

    def pop(self, key: Key, default: Any = _MISSING) -> Any:
        """Removes `key` and returns its value (`default` if it has none, else KeyError)."""
        key = b"" if key is None else key
        if key in self._values:
            self._changed.add(key)
            return self._values.pop(key)
        if default is _MISSING:
            raise KeyError(key)
        return default

    def touch(self, key: Key) -> None:
        """Marks `key` changed: its value was changed in place."""
        key = b"" if key is None else key
        if key in self._values:
            self._changed.add(key)

    def __contains__(self, key: object) -> bool:
        return (b"" if key is None else key) in self._values

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def keys(self) -> Any:
        """The keys that hold a value."""
        return self._values.keys()

    def values(self) -> Any:
        """The values, as a view (changing one in place needs `touch`)."""
        return self._values.values()

    def items(self) -> Any:
        """(key, value) pairs, as a view."""
        return self._values.items()

    def changed(self) -> int:
        """How many keys the next checkpoint writes."""
        return len(self._changed)

    def _take_round(self) -> List[bytes]:
        keys = sorted(self._changed)
        self._changed = set()
        return keys

    def _encode(self, key: bytes) -> Optional[bytes]:
        value = self._values.get(key, _MISSING)
        return None if value is _MISSING else self._encode_value(value)

    def _restore(self, key: bytes, body: bytes, upgrade: Upgrade) -> None:
        if key in self._values:
            raise StateError(RESTORED_TWICE)
        value = self._decode_value(body)
        if upgrade is not None:
            value = upgrade(value)
        if self._check is not None and not self._check(value):
            raise ValueError(f"{value!r} is refused by the operator's check")
        self._values[key] = value

    def _keys(self) -> int:
        return len(self._values)


RESTORED_TWICE = "it was restored already, or the instance is not fresh"


def checked_pairs(body: Any, what: str, shape: Tuple[type, ...]) -> List[Any]:
    """`body` as a list of lists, each starting with `len(shape)` values of these types
    (bool is not an int here), else ValueError naming `what`."""
    if not isinstance(body, list):
        raise ValueError(f"{what} is not a list")
    for item in body:
        if not isinstance(item, list) or len(item) != len(shape) + 1 or any(
                not isinstance(part, kind) or isinstance(part, bool)
                for part, kind in zip(item, shape)):
            raise ValueError(f"{what} holds {item!r}, not a list of {len(shape) + 1} values")
    return body


__all__ = ["KeyedState", "StateError", "StateStore", "decode_json", "encode_json"]
