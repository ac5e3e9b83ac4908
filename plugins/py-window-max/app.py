"""py-window-max: the maximum of a numeric JSON field per key and tumbling window, on
weir_sdk, emitted when the watermark closes the window.

Config: `field` (required), a top-level JSON field name; `window_ms` (required), the
window size in ms. Windows are [start, start + window_ms) with start = ts - ts %
window_ms. A record whose value is a JSON object with a finite number in `field`
counts towards its key's window (records without a key under the empty key); others
are dropped, as is a record whose window has fired (late). When the watermark reaches
a window's end, one record per (key, window), by window end then key bytes: the key
(empty for keyless records), `{"key":"<key>","window_start":<ms>,"window_end":<ms>,
"max":<number>}` (compact JSON, the number as Python prints it) at `window_end - 1`.

State: the SDK's `TumblingWindows`, one entry per key: the state version byte 0x01,
then `[window_ms, [[start, max], ...]]` in JSON; restoring another window size is
refused.
"""

import json
import math

import weir_sdk


def number_in(value, field):
    """The finite number in `field` of the JSON object `value`, or None."""
    try:
        document = json.loads(value)
    except (ValueError, RecursionError):
        return None
    found = document.get(field) if isinstance(document, dict) else None
    if isinstance(found, bool) or not isinstance(found, (int, float)):
        return None
    return found if math.isfinite(found) else None


class WindowMax(weir_sdk.Operator):
    def __init__(self, config):
        self.field = config.require("field", "the top-level JSON field whose maximum is kept")
        size = config.integer("window_ms", minimum=1, maximum=1 << 40,
                              expected="the window size in milliseconds")
        self.windows = weir_sdk.TumblingWindows(size, max)

    def process(self, records):
        for record in records:
            number = number_in(record.value, self.field)
            if number is not None:
                self.windows.add(record.key, record.timestamp, number)

    def on_watermark(self, watermark):
        for window, key, top in self.windows.fire(watermark):
            name = key.decode("utf-8", errors="replace")
            value = {"key": name, "window_start": window.start, "window_end": window.end, "max": top}
            self.emit(key, json.dumps(value, separators=(",", ":"), ensure_ascii=False), window.end - 1)


WitWorld = weir_sdk.export(WindowMax)
