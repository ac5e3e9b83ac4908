"""The `Operator` an author subclasses, and `export`, which wraps it into the class
componentize-py exports (`WitWorld`): config and ports checked once, batches unpacked
and packed with each record's output, and the whole state protocol of weir:operator
(snapshot rounds cut into chunks within `max-bytes`, each entry versioned; restores
checked) done here. Built against wit/0.3 it is a weir:operator@0.3 operator; against
wit (0.2), the same operator with one input and one output."""

import os
import traceback
from typing import Any, Callable, ClassVar, Dict, List, Optional, Sequence, Tuple, Type

from . import log
from .config import DEFAULT_INPUTS, DEFAULT_OUTPUTS, Config
from .errors import Error, StateError
from .records import Bytes, Headers, Output, Record, Records, unpack
from .state import StateStore

# The most a key and its value together may be: one changelog record (wit/operator.wit).
MAX_ENTRY_BYTES = 998_995
# Entries per snapshot chunk at most: Python spends microseconds per entry, and 4 MiB of
# small entries would be 150,000 of them, too many for one call's deadline. The host
# asks again until a chunk comes back empty, so a round needs no bound of its own.
MAX_CHUNK_ENTRIES = 16_384
# Where the SDK's own frames are, to point an error at the operator's code instead.
_SDK_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


class Operator:
    """Base class of an operator. Subclass it, then export it with `export`.

    `__init__(config)` reads the job's `[operators.config]` through `Config` (a key it
    never reads is refused as unknown), looks up the inputs and outputs it needs by
    name (`config.input("users")`), and creates the operator's keyed state, if any: one
    attribute holding a `KeyedState`, `Table`, `TumblingWindows` or `SessionWindows`.
    The SDK checkpoints and restores it; the operator writes no state code.
    """

    state_version: ClassVar[int] = 1
    """The version of the state's encoding, 1 to 255, stored with every entry. Raise it
    when what the state holds changes shape; a checkpoint of another version is refused
    unless `upgrade_state` converts it."""

    def __init__(self, config: Config) -> None:
        pass

    def process(self, records: Records) -> None:
        """Handles a batch of records in arrival order, emitting with `emit`; the batch
        came from input `records.input` (an index into `Config.inputs`)."""
        raise NotImplementedError(f"{type(self).__name__} must define process(records)")

    def on_watermark(self, watermark: int) -> None:
        """Event time reached `watermark` (epoch ms): no earlier record will follow.
        Emit what this completes (e.g. fired windows)."""

    def restored(self, watermark: int) -> None:
        """The state was restored from a checkpoint taken at event time `watermark`."""

    def upgrade_state(self, version: int, value: Any) -> Any:
        """Converts one restored value (of a KeyedState, or a window's accumulator)
        written with an older `state_version`. By default such state is refused."""
        raise StateError(f"it was written with state version {version}, and this operator "
                         f"reads version {self.state_version}; define upgrade_state to "
                         "convert it, or restore a snapshot of this version")

    def emit(self, key: Optional[Bytes], value: Optional[Bytes], timestamp: int,
             headers: Headers = ()) -> None:
        """Emits a record: `key` (None: no key), `value` (bytes, or str as UTF-8; None:
        a tombstone, which a compacted output topic takes as the key's deletion), event
        time `timestamp` in epoch ms, and `headers` as (name, bytes) pairs."""
        raise Error("emit is available once the operator is exported and initialised")

    def emit_to(self, output: Any, key: Optional[Bytes], value: Optional[Bytes], timestamp: int,
                headers: Headers = ()) -> None:
        """Emits a record to `output`: a name in `Config.outputs`, or its index (as
        `Config.output(name)` gives it; 0 is the first output, where `emit` goes)."""
        raise Error("emit_to is available once the operator is exported and initialised")

    def forward(self, record: Record) -> None:
        """Emits `record` unchanged (key, value, timestamp and headers) to the first output."""
        self.emit(*record)

    def forward_to(self, output: Any, record: Record) -> None:
        """Emits `record` unchanged to `output` (a name or an index, as for `emit_to`)."""
        self.emit_to(output, *record)


def export(operator: Type[Operator]) -> type:
    """The `WitWorld` class componentize-py exports, running `operator`:

        WitWorld = weir_sdk.export(MyOperator)
    """
    import wit_world
    from componentize_py_types import Err
    from wit_world.imports import types

    glue = Glue(operator, types)

    def call(method: Callable[..., Any]) -> Callable[..., Any]:
        def export_call(_: Any, *args: Any) -> Any:
            try:
                return method(*args)
            except Err:
                raise
            except Exception as error:  # every failure becomes the call's error message
                raise Err(describe(error)) from None
        export_call.__name__ = method.__name__
        return export_call

    if hasattr(types, "Emitted"):  # weir:operator@0.3.0 (wit/0.3)
        class WitWorld(wit_world.WitWorld):
            init = call(glue.init)
            process = call(glue.process)
            on_watermark = call(glue.on_watermark)
            snapshot = call(glue.snapshot)
            restore = call(glue.restore)
            restored = call(glue.restored)
    else:  # weir:operator@0.2.0 (wit): one input and one output
        class WitWorld(wit_world.WitWorld):  # type: ignore[no-redef]
            init = call(glue.init_single)
            process = call(glue.process_single)
            on_watermark = call(glue.on_watermark_single)
            snapshot = call(glue.snapshot)
            restore = call(glue.restore)
            restored = call(glue.restored)

    WitWorld.__doc__ = f"The weir:operator exports of {operator.__name__}."
    return WitWorld


def describe(error: BaseException) -> str:
    """A failure as the host reports it: an `Error`'s message as it is, any other
    exception with its type and where the operator raised it."""
    if isinstance(error, Error):
        return str(error)
    frames = traceback.extract_tb(error.__traceback__)
    ours = [f for f in frames if not os.path.abspath(f.filename).startswith(_SDK_DIR)]
    where = ours[-1] if ours else None
    at = f" (at {where.filename}:{where.lineno}, in {where.name})" if where else ""
    return f"{type(error).__name__}: {error}{at}"


class Glue:
    """One instance's operator, its ports, its output buffer and its snapshot round."""

    def __init__(self, operator: Type[Operator], types: Any) -> None:
        self._class = operator
        self._types = types
        self._output = Output(types)
        self._operator: Optional[Operator] = None
        self._inputs: Tuple[str, ...] = ()
        self._outputs: Tuple[str, ...] = ()
        self._output_index: Dict[str, int] = {}
        self._state: Optional[StateStore] = None
        self._version = b""
        # The round being handed over: its keys, the next one's index, and that key's
        # body if the last chunk had no room for it.
        self._round: Optional[List[bytes]] = None
        self._next = 0
        self._pending: Optional[Tuple[int, Optional[bytes]]] = None

    def _ready(self) -> Operator:
        if self._operator is None:
            raise Error("the operator is not initialised: the host must call init first")
        return self._operator

    def init(self, config: Sequence[Tuple[str, str]], inputs: Sequence[str],
             outputs: Sequence[str]) -> None:
        if self._operator is not None:
            raise Error("init was called twice on one instance; the host must instantiate "
                        "the plugin again instead")
        settings = Config(config, inputs, outputs)
        self._inputs, self._outputs = settings.inputs, settings.outputs
        self._output_index = {}
        for index, name in enumerate(self._outputs):
            self._output_index.setdefault(name, index)
        operator = self._class(settings)
        settings.check_unknown()
        self._state = find_state(operator)
        version = self._class.state_version
        if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= 255:
            raise Error(f"{self._class.__name__}.state_version is {version!r}: it must be "
                        "an integer from 1 to 255")
        self._version = bytes((version,))
        operator.emit = self._output.emit  # type: ignore[method-assign]
        operator.emit_to = self._emit_to  # type: ignore[method-assign]
        self._operator = operator

    def _emit_to(self, output: Any, key: Optional[Bytes], value: Bytes, timestamp: int,
                 headers: Headers = ()) -> None:
        index = self._output_index.get(output) if isinstance(output, str) else output
        if type(index) is not int or not 0 <= index < len(self._outputs):
            raise Error(self._no_output(output))
        self._output.emit_to(index, key, value, timestamp, headers)

    def _no_output(self, output: Any) -> str:
        names = "[" + ", ".join(self._outputs) + "]"
        if isinstance(output, str):
            return (f"emit_to: this operator has no output named `{output}`; its outputs are "
                    f"{names}: look outputs up in __init__ with config.output(name), so that "
                    "a job without them fails at init")
        return (f"emit_to: output {output!r} is not an output index; this operator's outputs "
                f"are {names}, indexes 0 to {len(self._outputs) - 1}")

    def process(self, input: int, batch: Any) -> Any:
        operator = self._ready()
        if not 0 <= input < len(self._inputs):
            raise Error(f"process was given input {input}, but the operator's inputs are "
                        f"[{', '.join(self._inputs)}]")
        return self._types.Emitted(*self._run(operator.process, unpack(batch, input)))

    def on_watermark(self, watermark: int) -> Any:
        return self._types.Emitted(*self._run(self._ready().on_watermark, watermark))

    # weir:operator@0.2: one input and one output, named as the host names them.

    def init_single(self, config: Sequence[Tuple[str, str]]) -> None:
        self.init(config, DEFAULT_INPUTS, DEFAULT_OUTPUTS)

    def process_single(self, batch: Any) -> Any:
        return self._run(self._ready().process, unpack(batch))[0]

    def on_watermark_single(self, watermark: int) -> Any:
        return self._run(self._ready().on_watermark, watermark)[0]

    def _run(self, method: Callable[[Any], None], argument: Any) -> Tuple[Any, bytes]:
        """Calls the operator's `method`; returns what it emitted, packed."""
        try:
            method(argument)
        except BaseException:
            self._output.take()  # what a failed call emitted is no output
            raise
        return self._output.take()

    def snapshot(self, max_bytes: int) -> Any:
        """The next chunk of this round's changed keys; an empty chunk ends the round."""
        self._ready()
        state = self._state
        if state is None:
            return self._types.StateChunk(b"", [])
        if self._round is None:
            self._round, self._next, self._pending = state._take_round(), 0, None
        data, entries = self._fill(state, self._round, max_bytes)
        if not entries:
            self._round = None
        return self._types.StateChunk(bytes(data), entries)

    def _fill(self, state: StateStore, keys: List[bytes],
              max_bytes: int) -> Tuple[bytearray, List[Any]]:
        """Entries of `keys` from `self._next` on while they fit in `max_bytes` (the
        first always does) and number at most MAX_CHUNK_ENTRIES, each key with the
        version byte and its body, or removed."""
        entry, version = self._types.StateEntry, self._version
        data = bytearray()
        entries: List[Any] = []
        index = self._next
        end = min(len(keys), index + MAX_CHUNK_ENTRIES)
        while index < end:
            key = keys[index]
            if self._pending is not None and self._pending[0] == index:
                body = self._pending[1]
            else:
                body = state._encode(key)
            size = len(key) if body is None else len(key) + 1 + len(body)
            if size > MAX_ENTRY_BYTES:
                raise StateError(f"the state of key {key[:40]!r} is {size} bytes with its key, "
                                 f"over the {MAX_ENTRY_BYTES} bytes one state entry may hold "
                                 "(one changelog record): keep less state per key")
            if entries and len(data) + size > max_bytes:
                self._pending = (index, body)
                break
            key_offset = len(data)
            data += key
            if body is None:
                entries.append(entry(key_offset, len(key), 0, 0, True))
            else:
                data += version
                data += body
                entries.append(entry(key_offset, len(key), key_offset + len(key), 1 + len(body),
                                     False))
            index += 1
        self._next = index
        return data, entries

    def restore(self, chunk: Any) -> None:
        """Adds a checkpoint's entries; they are not changes for the next snapshot.
        One loop, no call per entry but the state's: a chunk may hold 100,000 keys."""
        self._ready()
        data, state = chunk.data, self._state
        if state is None:
            if chunk.entries:
                raise StateError(f"{self._class.__name__} keeps no keyed state, but was given "
                                 f"{len(chunk.entries)} state entries ({len(data)} bytes): "
                                 "restore a snapshot of this plugin")
            return
        size, version, restore = len(data), self._version[0], state._restore
        for entry in chunk.entries:
            key_offset, key_len = entry.key_offset, entry.key_len
            value_offset, value_len = entry.value_offset, entry.value_len
            if key_offset + key_len > size or value_offset + value_len > size:
                raise StateError(f"a state entry lies outside its chunk's {size} bytes of data "
                                 f"(key {key_offset}+{key_len}, value {value_offset}+{value_len})")
            key = data[key_offset:key_offset + key_len]
            try:
                if entry.removed or not value_len or data[value_offset] != version:
                    value = data[value_offset:value_offset + value_len]
                    self._restore_other(state, key, entry.removed, value)
                else:
                    restore(key, data[value_offset + 1:value_offset + value_len], None)
            except Error as error:
                raise StateError(f"cannot restore key {key[:40]!r}: {error}") from None
            except (ValueError, TypeError, RecursionError) as error:
                value = data[value_offset:value_offset + min(value_len, 40)]
                raise StateError(f"cannot restore key {key[:40]!r}: its state {value!r} is not a "
                                 f"version {value[0]} {state._name} ({error})") from None

    def _restore_other(self, state: StateStore, key: bytes, removed: bool, value: bytes) -> None:
        """An entry that is not of this state version: a removal, another version that
        `upgrade_state` converts, or a refusal."""
        if removed:
            raise StateError("a restore never holds removals")
        operator = self._operator
        if not value or type(operator).upgrade_state is Operator.upgrade_state:
            raise StateError(f"its state does not start with state encoding version "
                             f"{self._version[0]} (got {value[:8]!r}); restore a snapshot of "
                             "this plugin")
        old = value[0]
        state._restore(key, value[1:], lambda part: operator.upgrade_state(old, part))

    def restored(self, watermark: int) -> None:
        operator = self._ready()
        if self._state is not None:
            self._state._restored(watermark)
            log.info(f"{self._class.__name__}: restored the state of {self._state._keys()} keys")
        operator.restored(watermark)


def find_state(operator: Operator) -> Optional[StateStore]:
    """The one state object among the operator's attributes, if any."""
    found = [(name, value) for name, value in vars(operator).items()
             if isinstance(value, StateStore)]
    if len(found) > 1:
        names = ", ".join(name for name, _ in found)
        raise Error(f"{type(operator).__name__} holds {len(found)} keyed states ({names}); an "
                    "operator keeps one: put what a key needs in one value (a dict or a list)")
    return found[0][1] if found else None


__all__ = ["Operator", "export"]
