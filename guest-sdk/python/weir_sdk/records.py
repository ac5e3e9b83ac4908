"""Records in and out of an operator. A batch crosses the Wasm boundary packed (one
data buffer, flat entries); the SDK slices each record's key and value out of it once
and packs what the operator emits back the same way, with the output of each record
that does not go to the first."""

from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

Headers = Sequence[Tuple[str, bytes]]
Bytes = Union[bytes, bytearray, str]

_NO_HEADERS: Tuple[Tuple[str, bytes], ...] = ()
_tuple_new = tuple.__new__
# The value offset of a record without a value (its value length is 0): a tombstone.
_NO_VALUE = 0xFFFFFFFF


class Record(NamedTuple):
    """One input record. `key` is None for a record without a key (its state key is
    then the empty key b""); `value` is None for a record without a value (a tombstone,
    handed so only to an operator whose job file sets `tombstones = true`; to others it
    comes as b""); `timestamp` is its event time in epoch milliseconds."""

    key: Optional[bytes]
    value: Optional[bytes]
    timestamp: int
    headers: Headers = _NO_HEADERS


class Window(NamedTuple):
    """An event-time window [start, end), epoch milliseconds."""

    start: int
    end: int


class Records(list):
    """A batch's records, in arrival order: a list of `Record`, and `input`, the index
    of the operator's input it came from (in `Config.inputs`; 0 for an operator with
    one input)."""

    __slots__ = ("input",)

    def __init__(self, records: Sequence[Record] = (), input: int = 0) -> None:
        super().__init__(records)
        self.input = input


def unpack(batch: Any, input: int = 0) -> Records:
    """The records of a packed `batch`, in order (one tuple and two slices each), from
    input `input`."""
    return Records(_records(batch), input)


def _records(batch: Any) -> List[Record]:
    data = batch.data
    new, record = _tuple_new, Record
    if not batch.headers:
        return [new(record, (data[e.key_offset:e.key_offset + e.key_len] if e.has_key else None,
                             data[e.value_offset:e.value_offset + e.value_len]
                             if e.value_offset != _NO_VALUE or e.value_len else None,
                             e.timestamp, _NO_HEADERS))
                for e in batch.entries]
    by_entry: Dict[int, List[Tuple[str, bytes]]] = {}
    for header in batch.headers:
        by_entry.setdefault(header.entry, []).append((header.name, header.value))
    return [new(record, (data[e.key_offset:e.key_offset + e.key_len] if e.has_key else None,
                         data[e.value_offset:e.value_offset + e.value_len]
                         if e.value_offset != _NO_VALUE or e.value_len else None,
                         e.timestamp, by_entry.get(index, _NO_HEADERS)))
            for index, e in enumerate(batch.entries)]


class Output:
    """What an operator emits during one call, packed as the host wants it. A record
    for the first output costs nothing more than in an operator with one output: only
    the records for another are noted, as (record index, output index)."""

    def __init__(self, types: Any) -> None:
        self._types = types
        self._entry = types.Entry
        self._data = bytearray()
        self._entries: List[Any] = []
        self._headers: List[Any] = []
        self._routed: List[Tuple[int, int]] = []

    def emit(self, key: Optional[Bytes], value: Optional[Bytes], timestamp: int,
             headers: Headers = _NO_HEADERS) -> None:
        """Emits a record: `key` (None: no key), `value` (bytes, or str as UTF-8; None: a
        tombstone), event time `timestamp` (epoch ms) and `headers` as (name, value)
        pairs."""
        data = self._data
        if key is None:
            key_offset = key_len = 0
        else:
            if isinstance(key, str):
                key = key.encode()
            key_offset = len(data)
            key_len = len(key)
            data += key
        if value is None:
            value_offset, value_len = _NO_VALUE, 0
        else:
            if isinstance(value, str):
                value = value.encode()
            value_offset, value_len = len(data), len(value)
            data += value
        if headers:
            self._add_headers(len(self._entries), headers)
        self._entries.append(self._entry(key is not None, key_offset, key_len,
                                         value_offset, value_len, timestamp))

    def emit_to(self, output: int, key: Optional[Bytes], value: Optional[Bytes], timestamp: int,
                headers: Headers = _NO_HEADERS) -> None:
        """`emit` to output index `output`, which the caller has checked (0 to 255)."""
        self.emit(key, value, timestamp, headers)
        if output:
            self._routed.append((len(self._entries) - 1, output))

    def _add_headers(self, index: int, headers: Headers) -> None:
        header = self._types.Header
        for name, value in headers:
            self._headers.append(header(index, name, bytes(value)))

    def take(self) -> Tuple[Any, bytes]:
        """The batch emitted since the last `take` and each record's output as the WIT's
        `emitted.outputs` wants them (empty: all to the first); the buffer starts afresh."""
        batch = self._types.Batch(bytes(self._data), self._entries, self._headers)
        outputs = b""
        if self._routed:
            table = bytearray(len(self._entries))
            for index, output in self._routed:
                table[index] = output
            outputs = bytes(table)
            self._routed = []
        self._data = bytearray()
        self._entries = []
        self._headers = []
        return batch, outputs
