"""weir_sdk: write weir stream operators in Python.

An operator is a subclass of `Operator` with `process(records)` and, if it waits for
event time, `on_watermark(watermark)`; it finds its inputs and outputs by name in its
`Config`, and its keyed state is one `KeyedState`, `Table` (a stream–table join),
`TumblingWindows` or `SessionWindows` attribute, which the SDK checkpoints key by key
(only the keys changed since the last checkpoint) and restores. One line exports it:

    WitWorld = weir_sdk.export(MyOperator)

`scripts/build-plugins` puts this package into every Python component; see
guest-sdk/python/README.md.
"""

from .config import Config
from .errors import ConfigError, Error, StateError
from .join import Table
from .operator import Operator, export
from .records import Record, Records, Window
from .state import KeyedState, decode_json, encode_json
from .windows import SessionWindows, TumblingWindows
from . import log

__all__ = [
    "Config",
    "ConfigError",
    "Error",
    "KeyedState",
    "Operator",
    "Record",
    "Records",
    "SessionWindows",
    "StateError",
    "Table",
    "TumblingWindows",
    "Window",
    "decode_json",
    "encode_json",
    "export",
    "log",
]
