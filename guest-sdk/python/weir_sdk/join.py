"""The table side of a stream–table join: the latest row per key of a table input (a
compacted topic read as a table), looked up by the stream records of that key. It is
keyed state like `KeyedState`, so a checkpoint writes only the keys updated or removed
since the last one."""

from typing import Any, Callable, Optional, TypeVar

from .records import Record
from .state import KeyedState

V = TypeVar("V")


def _as_is(row: Any) -> Any:
    return row


class Table(KeyedState[V]):
    """The latest row of each key of a table input, for the stream records of that key.

    A table input delivers its updates as records: the key is the table key (None, a
    record without a key, is the empty key b""), the value the row, and an empty value
    removes the key (a tombstone). `update(record)` applies one; `lookup(record)` finds
    the row of a stream record's key. At a job's first start the host delivers the
    whole table before any stream record, so the first stream records already find
    every row; after a restore the rows come back from the checkpoint.

    Rows are the values' bytes, checkpointed as they are. `update(record, row)` keeps
    `row(value)` instead, parsed once per update rather than once per lookup; then
    pass `encode` and `decode` for what `row` returns (`weir_sdk.encode_json` and
    `decode_json` for a JSON value). Everything else is `KeyedState`'s: `[]`, `get`,
    `in`, `len`, `items`, `pop`, and `check` refusing a restored row.
    """

    def __init__(self, name: str = "row", *, check: Optional[Callable[[Any], bool]] = None,
                 encode: Callable[[V], bytes] = _as_is,
                 decode: Callable[[bytes], V] = _as_is) -> None:
        super().__init__(name, check=check, encode=encode, decode=decode)

    def update(self, record: Record, row: Optional[Callable[[bytes], Optional[V]]] = None) -> None:
        """Applies an update of the table input: `record`'s key now holds its value, or
        `row(value)` if `row` is given; nothing if the value is empty (a tombstone, for
        which `row` is not called) or `row` returns None (a row it cannot use)."""
        key = record.key
        value = record.value
        kept = None if not value else value if row is None else row(value)
        if kept is None:
            self.pop(key, None)
        else:
            self[key] = kept

    def lookup(self, record: Record) -> Optional[V]:
        """The row of the stream record's key (the empty key for none), or None."""
        return self.get(record.key)


__all__ = ["Table"]
