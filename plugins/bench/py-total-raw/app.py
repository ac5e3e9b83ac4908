"""py-total-raw: py-total as it was written by hand before weir_sdk, state protocol
and all; kept only so that `bench/run --languages` can set the SDK's py-total beside it.

py-total: a running total of a numeric JSON field per record key.

Config: `field` (required), a top-level JSON field name. For each record whose value
is a JSON object with a number in `field`, the total of the record's key grows by that
number and one record is emitted: the same key (an absent key stays absent), the
value `{"key":"<key>","total":<total>}` in compact JSON and the input's timestamp.
Records without a key add up under the empty key. Other records are dropped.

Totals are Python numbers: an int while every number added to the key was an integer
(`7`, unbounded), a float from the first non-integer on (`7.5`, and `3.0` stays
`3.0`), printed as `json.dumps` prints them. NaN, infinities and a record that would
make the total infinite are dropped.

State (weir:operator@0.2): one entry per key, its value the byte 0x01 (the encoding
version) followed by the total as `json.dumps` prints it (ASCII, e.g. `\\x0142`,
`\\x012.5`), which reads back as the same int or float. `snapshot` returns the keys
whose total changed since the previous round; restored keys are not changes.
"""

import json
import math

import wit_world
from componentize_py_types import Err
from wit_world.imports import log, types

PLUGIN = "py-total"
KNOWN_KEYS = ("field",)
STATE_VERSION = 1

# Module globals, since the exports hold no instance state. `_field` is set once by
# `init`; `_totals` maps key bytes to the key's total; `_changed` holds the keys
# changed since the current snapshot round was taken; `_round` is that round's keys
# not yet returned (sorted, last first), or None between rounds.
_field = None
_totals = {}
_changed = set()
_round = None


def _fail(message):
    raise Err(f"{PLUGIN}: {message}")


def _reject_constant(name):
    """Refuses NaN and infinities, which Python's json accepts but JSON does not."""
    raise ValueError(f"{name} is not a JSON number")


def _is_number(value):
    """A finite int or float (bool is an int in Python, but not a number here)."""
    return (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, float) and math.isfinite(value))


def _amount(value):
    """The number in `_field` of the JSON object `value`, or None."""
    try:
        document = json.loads(value, parse_constant=_reject_constant)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    if not isinstance(document, dict):
        return None
    found = document.get(_field)
    return found if _is_number(found) else None


def _encode_total(total):
    """A key's state: the version byte, then the total in JSON."""
    return bytes([STATE_VERSION]) + json.dumps(total).encode("ascii")


def _decode_total(key, value):
    """The total that `_encode_total` wrote as `value`, or a refusal naming `key`."""
    if value[:1] != bytes([STATE_VERSION]):
        _fail(f"cannot restore key {key!r}: its state does not start with encoding "
              f"version {STATE_VERSION} (got {value[:8]!r}); restore a snapshot of "
              "this plugin")
    try:
        total = json.loads(value[1:], parse_constant=_reject_constant)
    except ValueError:
        total = None
    if not _is_number(total):
        _fail(f"cannot restore key {key!r}: its state {value[:40]!r} is not a version "
              f"{STATE_VERSION} total (0x01 then a finite JSON number)")
    return total


def _output(key, total):
    """The emitted value: `{"key":"<key>","total":<total>}`, compact."""
    text = key.decode("utf-8", errors="replace")
    document = {"key": text, "total": total}
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


class WitWorld(wit_world.WitWorld):
    def init(self, config):
        global _field
        if _field is not None:
            _fail("init was called twice on one instance; the host must instantiate "
                  "the plugin again instead")
        settings = dict(config)
        unknown = [key for key in settings if key not in KNOWN_KEYS]
        if unknown:
            _fail(f"operator config has unknown key{'s' if len(unknown) > 1 else ''} "
                  + ", ".join(f"`{key}`" for key in unknown)
                  + "; this operator knows: " + ", ".join(KNOWN_KEYS))
        if settings.get("field", "") == "":
            _fail("operator config `field` is missing or empty: py-total adds up the "
                  "number in this top-level JSON field per key")
        _field = settings["field"]
        log.log(log.Level.INFO, f"{PLUGIN}: totalling field {_field} per key")

    def process(self, batch):
        """Adds each record's number to its key's total and emits the new total."""
        if _field is None:
            _fail("the operator is not initialised: the host must call init first")
        data = batch.data
        out = bytearray()
        entries = []
        for entry in batch.entries:
            amount = _amount(data[entry.value_offset:entry.value_offset + entry.value_len])
            if amount is None:
                continue
            key = data[entry.key_offset:entry.key_offset + entry.key_len] if entry.has_key else b""
            total = _totals.get(key, 0) + amount
            if isinstance(total, float) and not math.isfinite(total):
                continue
            _totals[key] = total
            _changed.add(key)
            # A keyless record's key is b"": offset 0, length 0, as the contract wants.
            key_offset = len(out) if entry.has_key else 0
            out += key
            value = _output(key, total)
            value_offset = len(out)
            out += value
            entries.append(types.Entry(
                has_key=entry.has_key, key_offset=key_offset, key_len=len(key),
                value_offset=value_offset, value_len=len(value),
                timestamp=entry.timestamp,
            ))
        return types.Batch(data=bytes(out), entries=entries, headers=[])

    def on_watermark(self, watermark):
        return types.Batch(data=b"", entries=[], headers=[])

    def snapshot(self, max_bytes):
        """The next chunk of this round's changed keys; an empty chunk ends the round.

        The first call of a round takes the changed keys (sorted) and starts tracking
        changes afresh. A chunk holds keys and totals back to back up to `max_bytes`
        of data, or a single entry that is bigger on its own.
        """
        global _round
        if _round is None:
            _round = sorted(_changed, reverse=True)
            _changed.clear()
        data = bytearray()
        entries = []
        while _round:
            key = _round[-1]
            value = _encode_total(_totals[key])
            if entries and len(data) + len(key) + len(value) > max_bytes:
                break
            _round.pop()
            entries.append(types.StateEntry(
                key_offset=len(data), key_len=len(key),
                value_offset=len(data) + len(key), value_len=len(value),
                removed=False,
            ))
            data += key + value
        if not entries:
            _round = None
        return types.StateChunk(data=bytes(data), entries=entries)

    def restore(self, chunk):
        """Adds a checkpoint's totals; they are not changes for the next snapshot."""
        if _field is None:
            _fail("the operator is not initialised: the host must call init first")
        data = chunk.data
        for entry in chunk.entries:
            if max(entry.key_offset + entry.key_len,
                   entry.value_offset + entry.value_len) > len(data):
                _fail(f"a state entry lies outside its chunk's {len(data)} bytes of data")
            key = data[entry.key_offset:entry.key_offset + entry.key_len]
            if entry.removed:
                _fail(f"cannot restore key {key!r}: a restore never holds removals")
            if key in _totals:
                _fail(f"cannot restore key {key!r}: it was restored already, or the "
                      "instance is not fresh")
            _totals[key] = _decode_total(
                key, data[entry.value_offset:entry.value_offset + entry.value_len])

    def restored(self, watermark):
        log.log(log.Level.INFO, f"{PLUGIN}: restored the totals of {len(_totals)} keys")
