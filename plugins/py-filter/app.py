"""py-filter: keeps the records whose JSON value has a field equal to a given value.

Config: `field` (a top-level field name) and `equals` (compared with a string field
as is, with any other JSON value in its compact JSON form: `42`, `true`, `null`).
Kept records pass unchanged, headers included; the rest are dropped. Tombstones
(records without a value, handed marked when the job file sets `tombstones = true`)
pass too: a filter of a compacted topic's rows then deletes what the topic deletes.
Stateless: implements weir:operator@0.2 with empty snapshots, and refuses to restore
entries.
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import log, types

KNOWN_KEYS = ("field", "equals")

# The value offset of a record without a value (its value length is 0).
NO_VALUE = 0xFFFFFFFF

# Set once by `init`; module globals, since the exports hold no instance state.
_field = None
_equals = None


def _fail(message):
    raise Err(message)


def _matches(value):
    try:
        document = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        return False
    if not isinstance(document, dict) or _field not in document:
        return False
    found = document[_field]
    if isinstance(found, str):
        return found == _equals
    return json.dumps(found, separators=(",", ":")) == _equals


class WitWorld(wit_world.WitWorld):
    def init(self, config):
        global _field, _equals
        if _field is not None:
            _fail("init was called twice on one instance; the host must instantiate "
                  "the plugin again instead")
        settings = dict(config)
        for key in settings:
            if key not in KNOWN_KEYS:
                _fail(f"operator config has unknown key `{key}`; this operator knows: "
                      + ", ".join(KNOWN_KEYS))
        for key in KNOWN_KEYS:
            if key not in settings:
                _fail(f"operator config `{key}` is missing: py-filter keeps records whose "
                      "JSON value has field `field` equal to `equals`")
        if settings["field"] == "":
            _fail("operator config `field` is empty: name a top-level JSON field")
        _field, _equals = settings["field"], settings["equals"]
        log.log(log.Level.INFO, f"py-filter: keeping records with {_field} == {_equals}")

    def process(self, batch):
        if _field is None:
            _fail("the operator is not initialised: the host must call init first")
        data = batch.data
        kept = []
        renumbered = {}
        for index, entry in enumerate(batch.entries):
            start = entry.value_offset
            tombstone = start == NO_VALUE and entry.value_len == 0
            if tombstone or _matches(data[start:start + entry.value_len]):
                renumbered[index] = len(kept)
                kept.append(entry)
        # Kept entries still point into the input's data: no bytes are copied.
        headers = [
            types.Header(entry=renumbered[h.entry], name=h.name, value=h.value)
            for h in batch.headers
            if h.entry in renumbered
        ]
        return types.Batch(data=data, entries=kept, headers=headers)

    def on_watermark(self, watermark):
        return types.Batch(data=b"", entries=[], headers=[])

    def snapshot(self, max_bytes):
        # Nothing ever changes: every round is one empty chunk.
        return types.StateChunk(data=b"", entries=[])

    def restore(self, chunk):
        if chunk.entries:
            _fail(f"py-filter is stateless and takes empty snapshots, but was given "
                  f"{len(chunk.entries)} state entries ({len(chunk.data)} bytes): "
                  "restore a snapshot of this plugin")

    def restored(self, watermark):
        pass
