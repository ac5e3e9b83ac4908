"""weir_sdk's unit tests, under the CPython that runs componentize-py: the bindings
componentize-py generates for wit/0.3 stand in for the component's, so the glue runs
as it runs in a plugin, minus Wasm (and once, in a child process, for wit: 0.2). `python -m unittest discover -s guest-sdk/python/tests`
from the repository root; tests/operator_py_sdk.rs runs it."""

import atexit
import operator
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
# componentize-py writes bindings only into a directory that does not exist yet.
_SCRATCH = os.environ.get("WEIR_BINDINGS_DIR")
if _SCRATCH:
    os.makedirs(_SCRATCH, exist_ok=True)
_WORK = tempfile.mkdtemp(prefix="weir-py-bindings-", dir=_SCRATCH)
atexit.register(shutil.rmtree, _WORK, ignore_errors=True)
BINDINGS = Path(_WORK) / "bindings"
COMPONENTIZE_PY = str(Path(sys.executable).with_name("componentize-py"))
subprocess.run([COMPONENTIZE_PY, "-d", str(ROOT / "wit/0.3"), "-w", "operator", "bindings", str(BINDINGS)],
               check=True, capture_output=True)
sys.path[:0] = [str(BINDINGS), str(ROOT / "guest-sdk/python")]

import weir_sdk  # noqa: E402
from componentize_py_types import Err  # noqa: E402
from weir_sdk import log  # noqa: E402
from weir_sdk.operator import MAX_ENTRY_BYTES  # noqa: E402
from wit_world.imports import types  # noqa: E402


class HostLog:
    """Stands in for the host's log import."""
    Level = types.__class__  # replaced below
    lines = []

    @staticmethod
    def log(level, message):
        HostLog.lines.append((level, message))


from wit_world.imports.log import Level  # noqa: E402

HostLog.Level = Level
log._host = HostLog


NO_VALUE = 0xFFFFFFFF


def batch(*records):
    """A packed batch of (key, value, timestamp[, headers]) records; a value None is a
    tombstone, as the host hands it to an operator with `tombstones = true`."""
    data, entries, headers = bytearray(), [], []
    for index, (key, value, timestamp, *rest) in enumerate(records):
        key_offset = len(data) if key is not None else 0
        data += key or b""
        value_offset = len(data) if value is not None else NO_VALUE
        entries.append(types.Entry(key is not None, key_offset, len(key or b""), value_offset, len(value or b""), timestamp))
        data += value or b""
        for name, header in (rest[0] if rest else []):
            headers.append(types.Header(index, name, header))
    return types.Batch(bytes(data), entries, headers)


def out(result):
    """An emitted batch's records as (key, value, timestamp, headers), a value None for
    a tombstone."""
    if isinstance(result, types.Emitted):
        result = result.batch
    data = result.data
    return [(data[e.key_offset:e.key_offset + e.key_len] if e.has_key else None,
             None if (e.value_offset, e.value_len) == (NO_VALUE, 0)
             else data[e.value_offset:e.value_offset + e.value_len], e.timestamp,
             [(h.name, h.value) for h in result.headers if h.entry == i])
            for i, e in enumerate(result.entries)]


def chunk(*pairs):
    """A state chunk of (key, value or None) pairs."""
    data, entries = bytearray(), []
    for key, value in pairs:
        key_offset = len(data)
        data += key
        if value is None:
            entries.append(types.StateEntry(key_offset, len(key), 0, 0, True))
        else:
            entries.append(types.StateEntry(key_offset, len(key), len(data), len(value), False))
            data += value
    return types.StateChunk(bytes(data), entries)


def entries(state_chunk):
    data = state_chunk.data
    return [(data[e.key_offset:e.key_offset + e.key_len],
             None if e.removed else data[e.value_offset:e.value_offset + e.value_len])
            for e in state_chunk.entries]


def round_of(world, max_bytes=4096):
    """One whole snapshot round: every chunk's entries, each chunk checked."""
    found = []
    while True:
        part = world.snapshot(max_bytes)
        if not part.entries:
            return found
        size = sum(e.key_len + e.value_len for e in part.entries)
        assert len(part.data) <= max_bytes or len(part.entries) == 1, (len(part.data), max_bytes)
        assert size <= max_bytes or len(part.entries) == 1
        for e in part.entries:
            assert not e.removed or (e.value_offset, e.value_len) == (0, 0), "a removal with a value"
        found += entries(part)


class Counter(weir_sdk.Operator):
    """Counts records per key and emits each key's count."""

    def __init__(self, config):
        self.step = config.integer("step", 1, minimum=1)
        self.counts = weir_sdk.KeyedState("count")

    def process(self, records):
        for record in records:
            if record.value == b"forget":
                self.counts.pop(record.key, None)
                continue
            if record.value == b"boom":
                {}["missing"]
            self.counts[record.key] = self.counts.get(record.key, 0) + self.step
            self.emit(record.key, str(self.counts[record.key]), record.timestamp, record.headers)


def world(operator_class=Counter, config=(), inputs=("in",), outputs=("out",)):
    instance = weir_sdk.export(operator_class)()
    instance.init(list(config), list(inputs), list(outputs))
    return instance


class ConfigTest(unittest.TestCase):
    def test_missing_empty_bad_and_unknown_keys_are_named(self):
        config = weir_sdk.Config([("a", ""), ("n", "x"), ("m", "0")])
        for call, message in [
            (lambda: config.require("b", "a name"), "operator config `b` is missing: expected a name"),
            (lambda: config.require("a", "a name"), "operator config `a` is empty: expected a name"),
            (lambda: config.integer("n"), "operator config `n` = 'x' is not an integer"),
            (lambda: config.integer("m", minimum=1), "operator config `m` = 0 is out of range: expected an integer, at least 1"),
        ]:
            with self.assertRaises(weir_sdk.ConfigError) as caught:
                call()
            self.assertIn(message, str(caught.exception))
        self.assertEqual(config.integer("z", 7), 7)
        config = weir_sdk.Config([("x", "1"), ("y", "2"), ("step", "1")])
        config.get("step")
        with self.assertRaisesRegex(weir_sdk.ConfigError, "unknown keys `x`, `y`; this operator knows: step"):
            config.check_unknown()
        with self.assertRaisesRegex(weir_sdk.ConfigError, "`k` is given twice"):
            weir_sdk.Config([("k", "1"), ("k", "2")])

    def test_init_refuses_unknown_keys_and_a_second_call(self):
        with self.assertRaises(Err) as caught:
            world(config=[("step", "2"), ("bogus", "1")])
        self.assertEqual(caught.exception.value, "operator config has unknown key `bogus`; this operator knows: step")
        instance = world()
        with self.assertRaisesRegex(Err, "init was called twice"):
            instance.init([], ["in"], ["out"])
        with self.assertRaisesRegex(Err, "not initialised"):
            weir_sdk.export(Counter)().process(0, batch())


class KeyedStateTest(unittest.TestCase):
    def test_a_dict_that_records_changed_keys_with_none_as_the_empty_key(self):
        state = weir_sdk.KeyedState()
        state[None] = 1
        state[b"a"] = 2
        self.assertEqual((state[b""], state.get(None), b"" in state, None in state, len(state)), (1, 1, True, True, 2))
        self.assertEqual(sorted(state), [b"", b"a"])
        self.assertEqual(state._take_round(), [b"", b"a"])
        self.assertEqual(state._take_round(), [])
        del state[b"a"]
        self.assertEqual(state.pop(None), 1)
        self.assertEqual(state.pop(b"zz", "none"), "none")
        state.touch(b"not held")
        self.assertEqual((state._take_round(), len(state)), ([b"", b"a"], 0))
        self.assertIsNone(state._encode(b"a"))


class SnapshotTest(unittest.TestCase):
    def test_rounds_hand_over_each_changed_key_once_within_max_bytes(self):
        instance = world()
        keys = [b"k%03d" % i for i in range(200)]
        instance.process(0, batch(*[(key, b"x", i) for i, key in enumerate(keys)], (None, b"x", 9)))
        for max_bytes in (0, 7, 64, 1000):
            with self.subTest(max_bytes=max_bytes):
                instance.process(0, batch(*[(key, b"x", 1) for key in keys + [None]]))
                found = round_of(instance, max_bytes)
                self.assertEqual([key for key, _ in found], sorted(keys + [b""]))
                self.assertEqual(dict(found)[b"k007"][:1], b"\x01")
                self.assertEqual(round_of(instance), [], "the next round holds only later changes")
        instance.process(0, batch((b"k001", b"forget", 1), (b"k002", b"x", 2)))
        self.assertEqual(round_of(instance, 1), [(b"k001", None), (b"k002", b"\x016")])

    def test_a_chunk_holds_a_bounded_number_of_entries_whatever_max_bytes(self):
        instance = world()
        keys = [b"%05d" % i for i in range(20_000)]
        instance.process(0, batch(*[(key, b"x", 1) for key in keys]))
        sizes = []
        while True:
            part = instance.snapshot(64 << 20)
            if not part.entries:
                break
            sizes.append(len(part.entries))
        self.assertEqual(sizes, [16_384, 20_000 - 16_384])

    def test_an_entry_over_a_changelog_record_is_refused_naming_the_key(self):
        class Big(weir_sdk.Operator):
            def __init__(self, config):
                self.state = weir_sdk.KeyedState()

            def process(self, records):
                for record in records:
                    self.state[record.key] = "x" * int(record.value)

        instance = world(Big)
        instance.process(0, batch((b"k", str(MAX_ENTRY_BYTES - 4).encode(), 1)))
        self.assertEqual(len(round_of(instance, 10)), 1, "the largest entry fits, alone")
        instance.process(0, batch((b"k", str(MAX_ENTRY_BYTES - 3).encode(), 1)))
        with self.assertRaisesRegex(Err, r"the state of key b'k' is 998996 bytes with its key, over the 998995"):
            instance.snapshot(4 << 20)

    def test_bad_restores_are_refused_naming_the_key(self):
        malformed = types.StateChunk(b"abc", [types.StateEntry(0, 2, 2, 5, False)])
        for bad, message in [
            (malformed, "a state entry lies outside its chunk's 3 bytes of data"),
            (chunk((b"k", None)), "cannot restore key b'k': a restore never holds removals"),
            (chunk((b"k", b"\x011"), (b"k", b"\x012")), "cannot restore key b'k': it was restored already"),
            (chunk((b"k", b"\x021")), r"does not start with state encoding version 1 \(got b'\\x021'\)"),
            (chunk((b"k", b"")), r"does not start with state encoding version 1 \(got b''\)"),
            (chunk((b"k", b"\x01{")), r"its state b'\\x01\{' is not a version 1 count"),
        ]:
            with self.subTest(message=message), self.assertRaisesRegex(Err, message):
                world().restore(bad)
        with self.assertRaisesRegex(Err, "keeps no keyed state, but was given 1 state entries"):
            world(weir_sdk.Operator).restore(chunk((b"k", b"\x011")))

    def test_a_restore_continues_where_the_snapshot_was_and_is_no_change(self):
        first = world()
        first.process(0, batch((b"a", b"x", 1), (b"a", b"x", 2), (None, b"x", 3)))
        image = round_of(first)
        second = world()
        second.restore(chunk(*image))
        second.restored(5)
        self.assertEqual(round_of(second), [])
        self.assertIn((Level.INFO, "Counter: restored the state of 2 keys"), HostLog.lines)
        self.assertEqual(out(second.process(0, batch((b"a", b"x", 6))))[0][1], b"3")

    def test_a_newer_state_version_upgrades_an_older_one(self):
        class Doubled(Counter):
            state_version = 2

            def upgrade_state(self, version, value):
                return {"version": version, "count": value}

        instance = world(Doubled)
        instance.restore(chunk((b"a", b"\x017")))
        self.assertEqual(instance.snapshot(100).entries, [])
        instance.process(0, batch((b"b", b"x", 1)))
        self.assertEqual(round_of(instance), [(b"b", b"\x021")])
        with self.assertRaisesRegex(Err, "state_version is 0: it must be an integer from 1 to 255"):
            world(type("Zero", (Counter,), {"state_version": 0}))

    def test_two_states_are_refused(self):
        class Two(weir_sdk.Operator):
            def __init__(self, config):
                self.a = weir_sdk.KeyedState()
                self.b = weir_sdk.TumblingWindows(10, max)

        with self.assertRaisesRegex(Err, r"Two holds 2 keyed states \(a, b\); an operator keeps one"):
            world(Two)


class RecordsTest(unittest.TestCase):
    def test_keys_values_headers_and_errors_cross_as_the_host_wants(self):
        instance = world()
        result = out(instance.process(0, batch((b"a", b"x", 10, [("h", b"1"), ("i", b"2")]), (None, b"y", 11))))
        self.assertEqual(result, [(b"a", b"1", 10, [("h", b"1"), ("i", b"2")]), (None, b"1", 11, [])])
        with self.assertRaises(Err) as caught:
            instance.process(0, batch((b"a", b"x", 12), (b"a", b"boom", 12)))
        self.assertRegex(caught.exception.value, r"^KeyError: 'missing' \(at .*test_weir_sdk.py:\d+, in process\)$")
        self.assertEqual(out(instance.process(0, batch((b"a", b"x", 13)))), [(b"a", b"3", 13, [])],
                         "what the failed call emitted is not emitted later")


class Deleter(weir_sdk.Operator):
    """Emits a tombstone for the value b"delete"; forwards every other record."""

    def process(self, records):
        for record in records:
            if record.value == b"delete":
                self.emit(record.key, None, record.timestamp)
            else:
                self.forward(record)


class TombstonesTest(unittest.TestCase):
    def test_tombstones_come_as_none_and_are_emitted_and_forwarded_as_such(self):
        instance = world(Deleter)
        result = out(instance.process(0, batch((b"a", None, 1, [("h", b"1")]), (b"b", b"", 2), (b"c", b"delete", 3))))
        self.assertEqual(result, [(b"a", None, 1, [("h", b"1")]), (b"b", b"", 2, []), (b"c", None, 3, [])])


class Join(weir_sdk.Operator):
    """Looks each click up in the `users` table; clicks that are not JSON go to `invalid`."""

    def __init__(self, config):
        config.input("clicks")
        self.users_input = config.input("users")
        config.deny_unknown_inputs("clicks", "users")
        self.invalid = config.find_output("invalid")
        self.users = weir_sdk.Table()

    def process(self, records):
        if records.input == self.users_input:
            for row in records:
                self.users.update(row)
            return
        for click in records:
            if not click.value.startswith(b"{"):
                self.forward_to(self.invalid if self.invalid is not None else 0, click)
                continue
            row = self.users.lookup(click)
            self.emit(click.key, click.value + b"+" + (row or b"-"), click.timestamp)
            if click.value == b"{both}":
                self.emit_to("audit", click.key, b"seen", click.timestamp)


JOIN_PORTS = {"inputs": ("clicks", "users"), "outputs": ("enriched", "invalid", "audit")}


class PortsTest(unittest.TestCase):
    def test_inputs_and_outputs_are_found_by_name_and_missing_ones_are_named(self):
        config = weir_sdk.Config([], ("clicks", "users"), ("out", "invalid"))
        self.assertEqual((config.inputs, config.outputs), (("clicks", "users"), ("out", "invalid")))
        self.assertEqual((config.input("users"), config.find_input("orders")), (1, None))
        self.assertEqual((config.output("invalid"), config.find_output("late")), (1, None))
        for call, message in [
            (lambda: config.input("orders"), "operator needs an input named `orders`; its inputs are "
             "[clicks, users]: name one `orders` in the operator's `inputs` in the job file"),
            (lambda: config.output("late"), "operator needs an output named `late`; its outputs are [out, invalid]"),
            (lambda: config.deny_unknown_inputs("clicks"), "operator was given an input named `users` it "
             "does not read; its inputs must be among [clicks]"),
            (lambda: weir_sdk.Config([], (), ("out",)), "needs at least one input and one output"),
            (lambda: weir_sdk.Config([], ("in",), [str(i) for i in range(257)]), "at most 256 outputs"),
        ]:
            with self.subTest(message=message), self.assertRaises(weir_sdk.ConfigError) as caught:
                call()
            self.assertIn(message, str(caught.exception))
        self.assertEqual(weir_sdk.Config([]).inputs, ("in",), "a native Config has one input and output")
        with self.assertRaises(Err) as caught:
            world(Join, inputs=("clicks", "profiles"))
        self.assertEqual(caught.exception.value, "operator needs an input named `users`; its inputs are "
                         "[clicks, profiles]: name one `users` in the operator's `inputs` in the job file")

    def test_batches_say_their_input_and_records_go_to_named_or_indexed_outputs(self):
        instance = world(Join, **JOIN_PORTS)
        self.assertEqual(instance.process(1, batch((b"u1", b"Ada", 1), (b"u2", b"Bo", 2))).batch.entries, [])
        emitted = instance.process(0, batch((b"u1", b"{a}", 3), (b"u3", b"{b}", 4)))
        self.assertEqual(emitted.outputs, b"", "all to the first output: no list")
        self.assertEqual([r[1] for r in out(emitted)], [b"{a}+Ada", b"{b}+-"])
        emitted = instance.process(0, batch((b"u2", b"bad", 5, [("h", b"1")]), (b"u1", b"{both}", 6),
                                            (None, b"{c}", 7)))
        self.assertEqual(out(emitted), [(b"u2", b"bad", 5, [("h", b"1")]), (b"u1", b"{both}+Ada", 6, []),
                                        (b"u1", b"seen", 6, []), (None, b"{c}+-", 7, [])])
        self.assertEqual(emitted.outputs, bytes([1, 0, 2, 0]))
        self.assertEqual(instance.process(0, batch((b"u1", b"{d}", 8))).outputs, b"", "routes start afresh")
        with self.assertRaisesRegex(Err, r"process was given input 2, but the operator's inputs are \[clicks, users\]"):
            instance.process(2, batch())

    def test_emitting_to_an_output_the_operator_lacks_is_refused_naming_its_outputs(self):
        class Bad(weir_sdk.Operator):
            def process(self, records):
                for record in records:
                    self.emit(None, b"first", 1)
                    self.emit_to(record.value.decode() if record.key else int(record.value), None, b"x", 1)

        for key, value, message in [
            (b"k", b"late", r"emit_to: this operator has no output named `late`; its outputs are \[out, side\]"),
            (None, b"2", r"emit_to: output 2 is not an output index; this operator's outputs are "
             r"\[out, side\], indexes 0 to 1"),
            (None, b"-1", "output -1 is not an output index"),
        ]:
            with self.subTest(message=message), self.assertRaisesRegex(Err, message):
                world(Bad, outputs=("out", "side")).process(0, batch((key, value, 1)))
        instance = world(Bad, outputs=("out", "side"))
        self.assertEqual(instance.process(0, batch((b"k", b"side", 1), (None, b"0", 2))).outputs, bytes([0, 1, 0, 0]))
        with self.assertRaises(Err):
            instance.process(0, batch((b"k", b"side", 1), (b"k", b"nope", 1)))
        self.assertEqual(instance.process(0, batch()).outputs, b"", "a failed call's routes are no output")

    def test_a_plugin_built_against_wit_0_2_is_the_same_operator_with_one_input_and_output(self):
        bindings = Path(_WORK) / "bindings-0.2"
        subprocess.run([COMPONENTIZE_PY, "-d", str(ROOT / "wit"), "-w", "operator", "bindings", str(bindings)],
                       check=True, capture_output=True)
        script = """
import weir_sdk
from componentize_py_types import Err
from wit_world.imports import types

class Echo(weir_sdk.Operator):
    def __init__(self, config):
        self.ports = (config.inputs, config.outputs)

    def process(self, records):
        for record in records:
            self.emit(record.key, record.value + str(records.input).encode(), record.timestamp)
            if record.value == b"side":
                self.emit_to(1, None, b"", 0)

instance = weir_sdk.export(Echo)()
instance.init([])
result = instance.process(types.Batch(b"kv", [types.Entry(True, 0, 1, 1, 1, 5)], []))
print(type(result).__name__, result.data, [e.timestamp for e in result.entries])
try:
    instance.process(types.Batch(b"side", [types.Entry(False, 0, 0, 0, 4, 5)], []))
except Err as error:
    print(error.value)
"""
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join([str(bindings), str(ROOT / "guest-sdk/python")])})
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stdout.splitlines(), [
            "Batch b'kv0' [5]",
            "emit_to: output 1 is not an output index; this operator's outputs are [out], indexes 0 to 0",
        ])


class TableTest(unittest.TestCase):
    def test_the_latest_row_per_key_a_tombstone_removes_and_only_changes_are_snapshotted(self):
        table = weir_sdk.Table()
        record = weir_sdk.Record
        table.update(record(b"u1", b"Ada", 1))
        table.update(record(None, b"nobody", 2))
        table.update(record(b"u2", b"Bo", 3))
        table.update(record(b"u2", b"Bea", 4))
        self.assertEqual((table.lookup(record(b"u2", b"click", 5)), table.lookup(record(None, b"c", 5))),
                         (b"Bea", b"nobody"))
        self.assertEqual(table._take_round(), [b"", b"u1", b"u2"])
        table.update(record(b"u1", b"", 6))
        table.update(record(b"u9", b"", 7))  # a tombstone for a key it never held
        self.assertIsNone(table.lookup(record(b"u1", b"click", 8)))
        self.assertEqual((table._take_round(), table._encode(b"u1"), table._encode(b"u2")), ([b"u1"], None, b"Bea"))
        table.update(record(b"u3", b"x", 9), lambda value: None)  # a row `row` cannot use removes
        self.assertEqual((len(table), table._take_round()), (2, []))

    def test_a_join_snapshots_changed_rows_and_a_restored_one_joins_the_same(self):
        first = world(Join, **JOIN_PORTS)
        first.process(1, batch((b"u1", b"Ada", 1), (b"u2", b"Bo", 2), (b"u3", b"Cy", 3)))
        image = dict(round_of(first, 1))
        self.assertEqual(image, {b"u1": b"\x01Ada", b"u2": b"\x01Bo", b"u3": b"\x01Cy"})
        first.process(1, batch((b"u2", b"", 4), (b"u3", b"Cyd", 5)))
        changes = round_of(first)
        self.assertEqual(changes, [(b"u2", None), (b"u3", b"\x01Cyd")])
        for key, value in changes:
            image.pop(key) if value is None else image.__setitem__(key, value)
        second = world(Join, **JOIN_PORTS)
        second.restore(chunk(*sorted(image.items())))
        second.restored(5)
        self.assertEqual(round_of(second), [])
        clicks = batch((b"u1", b"{a}", 6), (b"u2", b"{b}", 7), (b"u3", b"{c}", 8))
        self.assertEqual(out(second.process(0, clicks)), out(first.process(0, clicks)))
        self.assertEqual([r[1] for r in out(second.process(0, clicks))], [b"{a}+Ada", b"{b}+-", b"{c}+Cyd"])


def fired(windows, watermark):
    return [(tuple(window), key, value) for window, key, value in windows.fire(watermark)]


def restored_copy(state, fresh):
    """`fresh` with `state`'s entries restored, as the SDK would, round and all."""
    for key in state._take_round():
        body = state._encode(key)
        if body is not None:
            fresh._restore(key, body, None)
    return fresh


class WindowsTest(unittest.TestCase):
    def test_tumbling_windows_fire_by_end_then_key_and_drop_late_records(self):
        windows = weir_sdk.TumblingWindows(100, operator.add)
        for key, ts in [(b"b", 5), (b"a", 99), (None, 100), (b"a", 0), (b"a", -1)]:
            self.assertTrue(windows.add(key, ts, 1))
        self.assertEqual(windows.window_of(-1), (-100, 0))
        self.assertEqual(fired(windows, 100), [((-100, 0), b"a", 1), ((0, 100), b"a", 2), ((0, 100), b"b", 1)])
        self.assertFalse(windows.add(b"a", 50, 1))
        self.assertEqual((windows.late_records, len(windows), windows.get(None, 150)), (1, 1, 1))
        copy = restored_copy(windows, weir_sdk.TumblingWindows(100, operator.add))
        copy._restored(100)
        self.assertFalse(copy.add(b"z", 99, 1), "late after a restore too")
        self.assertEqual(fired(copy, 1000), [((100, 200), b"", 1)])
        with self.assertRaisesRegex(weir_sdk.StateError, "holds windows of 100 ms, and this operator's are 50 ms"):
            weir_sdk.TumblingWindows(50, max)._restore(b"k", b"[100,[]]", None)
        with self.assertRaisesRegex(ValueError, "positive integer"):
            weir_sdk.TumblingWindows(0, max)

    def test_sessions_merge_when_they_touch_in_order_and_fire_at_their_end(self):
        sessions = weir_sdk.SessionWindows(10, operator.add)
        for ts, value in [(0, [0]), (30, [30]), (20, [20]), (12, [12]), (50, [50])]:
            self.assertTrue(sessions.add(b"k", ts, value))
        # [0,10) and [12,22) stay apart; 20 joins 12's; 30 touches [20,30) at 30.
        self.assertEqual([tuple(w) for w, _ in sessions.sessions(b"k")], [(0, 10), (12, 40), (50, 60)])
        self.assertEqual(sessions.sessions(b"k")[1][1], [12, 20, 30], "merged in order of start")
        sessions.add(b"j", 5, [5])
        self.assertEqual(fired(sessions, 15), [((0, 10), b"k", [0]), ((5, 15), b"j", [5])])
        self.assertFalse(sessions.add(b"j", 4, [4]), "complete already, merges with none: late")
        self.assertFalse(sessions.add(b"k", 1, [1]), "[1, 11) is complete and does not reach 12")
        self.assertTrue(sessions.add(b"k", 2, [2]), "[2, 12) touches [12, 40)")
        copy = restored_copy(sessions, weir_sdk.SessionWindows(10, operator.add))
        copy._restored(15)
        self.assertTrue(copy.add(b"k", 39, [39]))
        self.assertEqual(fired(copy, 100), [((2, 49), b"k", [2, 12, 20, 30, 39]), ((50, 60), b"k", [50])])
        self.assertEqual(len(copy), 0)
        with self.assertRaisesRegex(ValueError, "not after the one before"):
            copy._restore(b"x", b"[10,[[0,10,1],[5,20,1]]]", None)


if __name__ == "__main__":
    unittest.main()
