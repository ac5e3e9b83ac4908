"""Keyed event-time windows fired by the watermark: tumbling (fixed, aligned to epoch
0) and session (closed by a gap without records). Each tracks the keys it changes, so
a checkpoint writes only those; a key's entry is its open windows with their size or
gap, so a restore with another size or gap is refused."""

import heapq
from typing import Any, Callable, Dict, Generic, List, Optional, Set, Tuple, TypeVar

from .records import Window
from .errors import StateError
from .state import RESTORED_TWICE, StateStore, Upgrade, checked_pairs, decode_json, encode_json

A = TypeVar("A")
Key = Optional[bytes]
Merge = Callable[[A, A], A]
Fired = List[Tuple[Window, bytes, A]]

NO_WATERMARK = -(1 << 63)
_MISSING: Any = object()


def _positive(what: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or value > 1 << 40:
        raise ValueError(f"{what} must be a positive integer of milliseconds (at most 2^40), "
                         f"got {value!r}")
    return value


class _Windows(StateStore, Generic[A]):
    """What both kinds share: late records, the watermark fired, changed keys."""

    def __init__(self, merge: Merge[A], check: Optional[Callable[[Any], bool]]) -> None:
        self._merge = merge
        self._check = check
        self._watermark = NO_WATERMARK
        self._changed: Set[bytes] = set()
        self.late_records = 0
        """Records dropped because their window had fired (not checkpointed)."""

    @property
    def watermark(self) -> int:
        """The highest watermark fired (or restored) so far."""
        return self._watermark

    def _take_round(self) -> List[bytes]:
        keys = sorted(self._changed)
        self._changed = set()
        return keys

    def _accumulator(self, value: Any, upgrade: Upgrade) -> Any:
        if upgrade is not None:
            value = upgrade(value)
        if self._check is not None and not self._check(value):
            raise ValueError(f"{value!r} is refused by the operator's check")
        return value

    def _restored(self, watermark: int) -> None:
        self._watermark = max(self._watermark, watermark)


class TumblingWindows(_Windows[A]):
    """One accumulator per key and tumbling window of `size_ms`.

    A record at `ts` belongs to [ts - ts % size_ms, + size_ms). `add` puts a value into
    its key's window: the first value is the accumulator, each later one is combined
    as `merge(accumulator, value)` (e.g. `max`, `operator.add`). `fire(watermark)`
    returns every window that ends at or before the watermark, by window end then key,
    and forgets it; a record for a fired window is late: dropped and counted.
    Accumulators are JSON values; `check` refuses a restored one it returns False for.
    """

    _name = "window state"

    def __init__(self, size_ms: int, merge: Merge[A], *,
                 check: Optional[Callable[[Any], bool]] = None) -> None:
        super().__init__(merge, check)
        self.size_ms = _positive("a tumbling window's size", size_ms)
        self._windows: Dict[bytes, Dict[int, A]] = {}
        self._keys_by_start: Dict[int, Set[bytes]] = {}
        self._starts: List[int] = []

    def window_of(self, timestamp: int) -> Window:
        """The window a record at `timestamp` belongs to."""
        start = timestamp - timestamp % self.size_ms
        return Window(start, start + self.size_ms)

    def add(self, key: Key, timestamp: int, value: A) -> bool:
        """Adds `value` to `key`'s window of `timestamp`; False if that window fired."""
        size = self.size_ms
        start = timestamp - timestamp % size
        if start + size <= self._watermark:
            self.late_records += 1
            return False
        key = b"" if key is None else key
        windows = self._windows.get(key)
        if windows is None:
            windows = self._windows[key] = {}
        accumulator = windows.get(start, _MISSING)
        if accumulator is _MISSING:
            windows[start] = value
            self._open(start, key)
        else:
            windows[start] = self._merge(accumulator, value)
        self._changed.add(key)
        return True

    def get(self, key: Key, timestamp: int) -> Optional[A]:
        """`key`'s accumulator in the window of `timestamp`, or None."""
        windows = self._windows.get(b"" if key is None else key)
        return None if windows is None else windows.get(timestamp - timestamp % self.size_ms)

    def _open(self, start: int, key: bytes) -> None:
        keys = self._keys_by_start.get(start)
        if keys is None:
            self._keys_by_start[start] = {key}
            heapq.heappush(self._starts, start)
        else:
            keys.add(key)

    def fire(self, watermark: int) -> Fired[A]:
        """Every (window, key, accumulator) with window end <= `watermark`, by end then
        key bytes; they are forgotten, and later records for them are late."""
        self._watermark = max(self._watermark, watermark)
        fired: Fired[A] = []
        size, starts = self.size_ms, self._starts
        while starts and starts[0] + size <= watermark:
            start = heapq.heappop(starts)
            window = Window(start, start + size)
            for key in sorted(self._keys_by_start.pop(start)):
                windows = self._windows[key]
                fired.append((window, key, windows.pop(start)))
                if not windows:
                    del self._windows[key]
                self._changed.add(key)
        return fired

    def __len__(self) -> int:
        """The (key, window) accumulators open."""
        return sum(len(windows) for windows in self._windows.values())

    def _encode(self, key: bytes) -> Optional[bytes]:
        windows = self._windows.get(key)
        if windows is None:
            return None
        return encode_json([self.size_ms, [[start, windows[start]] for start in sorted(windows)]])

    def _restore(self, key: bytes, body: bytes, upgrade: Upgrade) -> None:
        if key in self._windows:
            raise StateError(RESTORED_TWICE)
        entry = decode_json(body)
        if not isinstance(entry, list) or len(entry) != 2:
            raise ValueError("it is not [size, windows]")
        if entry[0] != self.size_ms:
            raise StateError(f"it holds windows of {entry[0]!r} ms, and this operator's are "
                             f"{self.size_ms} ms: restore with the size it was written with")
        windows: Dict[int, A] = {}
        for start, accumulator in checked_pairs(entry[1], "its windows", (int,)):
            if start % self.size_ms != 0:
                raise ValueError(f"window start {start} is not a multiple of the size")
            windows[start] = self._accumulator(accumulator, upgrade)
        if windows:
            self._windows[key] = windows
            for start in windows:
                self._open(start, key)

    def _keys(self) -> int:
        return len(self._windows)


class SessionWindows(_Windows[A]):
    """One accumulator per key and session: records of a key less than `gap_ms` apart.

    A record at `ts` opens the session [ts, ts + gap_ms); sessions of a key that
    overlap or touch merge, accumulators combined by `merge(earlier, later)` in order of
    start. A session fires once the watermark reaches its end. A record whose session
    would already be complete (`ts + gap_ms <= watermark`) and merges with none is late:
    dropped and counted. Accumulators are JSON values.
    """

    _name = "session state"

    def __init__(self, gap_ms: int, merge: Merge[A], *,
                 check: Optional[Callable[[Any], bool]] = None) -> None:
        super().__init__(merge, check)
        self.gap_ms = _positive("a session's gap", gap_ms)
        # Per key its sessions [start, end, accumulator], by start, disjoint, not touching.
        self._sessions: Dict[bytes, List[List[Any]]] = {}
        # (time, key) wake-ups, earliest first; one whose time is not its key's timer
        # any more is stale and skipped. A key's timer is never after its first end.
        self._timers: List[Tuple[int, bytes]] = []
        self._timer: Dict[bytes, int] = {}

    def add(self, key: Key, timestamp: int, value: A) -> bool:
        """Adds `value` at `timestamp` to `key`'s sessions; False if it came late."""
        key = b"" if key is None else key
        start, end = timestamp, timestamp + self.gap_ms
        sessions = self._sessions.get(key)
        if sessions is None:
            if end <= self._watermark:
                self.late_records += 1
                return False
            self._sessions[key] = [[start, end, value]]
        elif not self._merge_into(sessions, start, end, value):
            self.late_records += 1
            return False
        self._changed.add(key)
        self._arm(key, self._sessions[key][0][1])
        return True

    def _merge_into(self, sessions: List[List[Any]], start: int, end: int, value: A) -> bool:
        """Merges [start, end) into `sessions`; False if it is late and merges with none."""
        first = 0
        while first < len(sessions) and sessions[first][1] < start:
            first += 1
        last = first
        while last < len(sessions) and sessions[last][0] <= end:
            last += 1
        if first == last:
            if end <= self._watermark:
                return False
            sessions.insert(first, [start, end, value])
            return True
        merged = sessions[first:last]
        at = next((i for i, session in enumerate(merged) if session[0] > start), len(merged))
        parts = [session[2] for session in merged]
        parts.insert(at, value)
        accumulator = parts[0]
        for part in parts[1:]:
            accumulator = self._merge(accumulator, part)
        sessions[first:last] = [[min(start, merged[0][0]), max(end, merged[-1][1]), accumulator]]
        return True

    def _arm(self, key: bytes, at: int) -> None:
        timer = self._timer.get(key)
        if timer is None or at < timer:
            self._timer[key] = at
            heapq.heappush(self._timers, (at, key))

    def fire(self, watermark: int) -> Fired[A]:
        """Every (session, key, accumulator) ending at or before `watermark`, by end then
        key bytes; they are forgotten."""
        self._watermark = max(self._watermark, watermark)
        fired: Fired[A] = []
        timers = self._timers
        while timers and timers[0][0] <= watermark:
            at, key = heapq.heappop(timers)
            if self._timer.get(key) != at:
                continue
            del self._timer[key]
            sessions = self._sessions[key]
            done = 0
            while done < len(sessions) and sessions[done][1] <= watermark:
                start, end, accumulator = sessions[done]
                fired.append((Window(start, end), key, accumulator))
                done += 1
            if done:
                del sessions[:done]
                self._changed.add(key)
            if sessions:
                self._arm(key, sessions[0][1])
            else:
                del self._sessions[key]
        fired.sort(key=lambda item: (item[0].end, item[1]))
        return fired

    def sessions(self, key: Key) -> List[Tuple[Window, A]]:
        """`key`'s open sessions, by start."""
        found = self._sessions.get(b"" if key is None else key, [])
        return [(Window(start, end), accumulator) for start, end, accumulator in found]

    def __len__(self) -> int:
        """The sessions open, over all keys."""
        return sum(len(sessions) for sessions in self._sessions.values())

    def _encode(self, key: bytes) -> Optional[bytes]:
        sessions = self._sessions.get(key)
        return None if sessions is None else encode_json([self.gap_ms, sessions])

    def _restore(self, key: bytes, body: bytes, upgrade: Upgrade) -> None:
        if key in self._sessions:
            raise StateError(RESTORED_TWICE)
        entry = decode_json(body)
        if not isinstance(entry, list) or len(entry) != 2:
            raise ValueError("it is not [gap, sessions]")
        if entry[0] != self.gap_ms:
            raise StateError(f"it holds sessions of gap {entry[0]!r} ms, and this operator's "
                             f"gap is {self.gap_ms} ms: restore with the gap it was written with")
        sessions = checked_pairs(entry[1], "its sessions", (int, int))
        previous_end = None
        for session in sessions:
            if session[0] >= session[1] or (previous_end is not None
                                            and session[0] <= previous_end):
                raise ValueError(f"session {session[:2]} is empty, or not after the one before")
            previous_end = session[1]
            session[2] = self._accumulator(session[2], upgrade)
        if sessions:
            self._sessions[key] = sessions
            self._arm(key, sessions[0][1])

    def _keys(self) -> int:
        return len(self._sessions)
