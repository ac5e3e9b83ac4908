"""py-total: a running total of a numeric JSON field per record key, on weir_sdk.

Config: `field` (required), a top-level JSON field name. For each record whose value
is a JSON object with a number in `field`, the total of the record's key grows by that
number and one record is emitted: the same key (an absent key stays absent), the
value `{"key":"<key>","total":<total>}` in compact JSON and the input's timestamp.
Records without a key add up under the empty key. Other records are dropped.

Totals are Python numbers: an int while every number added to the key was an integer
(`7`, unbounded), a float from the first non-integer on (`7.5`, and `3.0` stays
`3.0`), printed as `json.dumps` prints them. NaN, infinities and a record that would
make the total infinite are dropped.

State: the SDK's `KeyedState`, one entry per key: the state version byte 0x01, then
the total in JSON (`\\x0142`, `\\x012.5`); a checkpoint writes the keys changed since
the previous one.
"""

import json
import math

import weir_sdk


def is_number(value):
    """A finite int or float (bool is an int in Python, but not a number here)."""
    return (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, float) and math.isfinite(value))


def no_constants(name):
    raise ValueError(f"{name} is not a JSON number")


class Total(weir_sdk.Operator):
    def __init__(self, config):
        self.field = config.require("field", "the top-level JSON field to add up per key")
        self.totals = weir_sdk.KeyedState("total", check=is_number)
        weir_sdk.log.info(f"py-total: totalling field {self.field} per key")

    def process(self, records):
        for record in records:
            try:
                document = json.loads(record.value, parse_constant=no_constants)
            except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
                continue
            amount = document.get(self.field) if isinstance(document, dict) else None
            if not is_number(amount):
                continue
            total = self.totals.get(record.key, 0) + amount
            if isinstance(total, float) and not math.isfinite(total):
                continue
            self.totals[record.key] = total
            name = (record.key or b"").decode("utf-8", errors="replace")
            value = json.dumps({"key": name, "total": total}, separators=(",", ":"), ensure_ascii=False)
            self.emit(record.key, value, record.timestamp)


WitWorld = weir_sdk.export(Total)
