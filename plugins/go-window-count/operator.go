// go-window-count: window-count written in Go against weir:operator@0.2. Counts
// records per key in tumbling event-time windows aligned to epoch 0 and emits, once
// the watermark reaches a window's end, exactly what the Rust window-count emits
// (plugins/README.md). Each key's state is its open windows; a snapshot returns the
// keys changed since the last one.

package main

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

const (
	maxWindowMs  = int64(1) << 40
	stateVersion = 1
	noWatermark  = math.MinInt64
)

type window struct {
	start int64
	count uint64
}

type keyState struct {
	key       string
	windows   []window // sorted by start
	dirty     bool     // changed since the last snapshot: in windowCount.dirty
	persisted bool     // the host holds an entry for it, so emptying it is a removal
}

type windowCount struct {
	windowMs    int64
	watermark   int64 // the highest fired: windows ending there are gone
	earliestEnd int64 // no open window ends before it
	late        uint64
	keys        map[string]*keyState
	dirty       []*keyState
	cursor      int     // how far the snapshot round has gone through dirty
	fired       []fired // reused by OnWatermark
	scratch     []byte  // reused by Snapshot
}

var operator = &windowCount{watermark: noWatermark, earliestEnd: math.MaxInt64, keys: map[string]*keyState{}}

func (w *windowCount) Init(config map[string]string, names []string) error {
	for _, name := range names {
		if name != "window_ms" {
			return fmt.Errorf("operator config has unknown key `%s`; this operator knows: window_ms", name)
		}
	}
	text, ok := config["window_ms"]
	if !ok {
		return fmt.Errorf("operator config `window_ms` is missing: set it to a positive integer of milliseconds, e.g. 60000, under [operators.config]")
	}
	// Surrounding whitespace is ignored, as the Rust SDK does.
	ms, err := strconv.ParseInt(strings.TrimSpace(text), 10, 64)
	if err != nil || ms <= 0 || ms > maxWindowMs {
		return fmt.Errorf("operator config `window_ms` = `%s` is not a positive integer of milliseconds at most %d, e.g. 60000", text, maxWindowMs)
	}
	w.windowMs = ms
	return nil
}

func (w *windowCount) end(start int64) int64 {
	if start > math.MaxInt64-w.windowMs {
		return math.MaxInt64
	}
	return start + w.windowMs
}

func (w *windowCount) markDirty(k *keyState) {
	if !k.dirty {
		k.dirty = true
		w.dirty = append(w.dirty, k)
	}
}

// count is k's count in the window starting at start, created if missing.
func (w *windowCount) count(k *keyState, start int64) *uint64 {
	at := len(k.windows)
	for at > 0 && k.windows[at-1].start > start { // in-order records: found at once
		at--
	}
	if at > 0 && k.windows[at-1].start == start {
		return &k.windows[at-1].count
	}
	k.windows = append(k.windows, window{})
	copy(k.windows[at+1:], k.windows[at:])
	k.windows[at] = window{start: start}
	w.earliestEnd = min(w.earliestEnd, w.end(start))
	return &k.windows[at].count
}

func (w *windowCount) Process(records []Record, _ *Output) error {
	for _, record := range records {
		start := record.Timestamp - ((record.Timestamp%w.windowMs)+w.windowMs)%w.windowMs
		if w.end(start) <= w.watermark { // its window has fired: late, dropped
			w.late++
			continue
		}
		k := w.keys[string(record.Key)]
		if k == nil {
			k = &keyState{key: string(record.Key)}
			w.keys[k.key] = k
		}
		*w.count(k, start)++
		w.markDirty(k)
	}
	return nil
}

type fired struct {
	start int64
	count uint64
	key   string
}

func (w *windowCount) OnWatermark(to int64, out *Output) error {
	w.watermark = max(w.watermark, to)
	if w.earliestEnd > to { // nothing ends yet: the common case, no scan
		return nil
	}
	done := w.fired[:0]
	next := int64(math.MaxInt64)
	for _, k := range w.keys {
		n := 0
		for n < len(k.windows) && w.end(k.windows[n].start) <= to {
			done = append(done, fired{k.windows[n].start, k.windows[n].count, k.key})
			n++
		}
		if n > 0 {
			k.windows = append(k.windows[:0], k.windows[n:]...)
			w.markDirty(k) // emptied keys stay until a snapshot has reported them
		}
		if len(k.windows) > 0 {
			next = min(next, w.end(k.windows[0].start))
		}
	}
	w.earliestEnd = next
	w.fired = done[:0]
	// By window end (all windows are one size, so by start), then key bytes.
	sort.Slice(done, func(i, j int) bool {
		if done[i].start != done[j].start {
			return done[i].start < done[j].start
		}
		return done[i].key < done[j].key
	})
	var value []byte
	for _, f := range done {
		end := w.end(f.start)
		value = append(value[:0], `{"key":`...)
		value = appendJSONString(value, []byte(f.key))
		value = append(value, `,"window_start":`...)
		value = strconv.AppendInt(value, f.start, 10)
		value = append(value, `,"window_end":`...)
		value = strconv.AppendInt(value, end, 10)
		value = append(value, `,"count":`...)
		value = strconv.AppendUint(value, f.count, 10)
		value = append(value, '}')
		out.Emit(f.key, value, end-1)
	}
	return nil
}

// encode appends k's entry to buf: the state version, window_ms (a restore with
// another is refused), then each open window's start and count, little-endian.
func (w *windowCount) encode(buf []byte, k *keyState) []byte {
	buf = append(buf, stateVersion)
	buf = binary.LittleEndian.AppendUint64(buf, uint64(w.windowMs))
	for _, win := range k.windows {
		buf = binary.LittleEndian.AppendUint64(buf, uint64(win.start))
		buf = binary.LittleEndian.AppendUint64(buf, win.count)
	}
	return buf
}

func (w *windowCount) Snapshot(maxBytes uint32, out *Chunk) error {
	for ; w.cursor < len(w.dirty); w.cursor++ {
		k := w.dirty[w.cursor]
		removed := len(k.windows) == 0
		if removed && !k.persisted { // born and emptied between snapshots
			continue
		}
		size := len(k.key)
		if !removed {
			size += 9 + 16*len(k.windows)
		}
		if out.Count() > 0 && out.Size()+size > int(maxBytes) {
			break // the next call takes it
		}
		if removed {
			out.Remove(k.key)
		} else {
			w.scratch = w.encode(w.scratch[:0], k)
			out.Put(k.key, w.scratch)
		}
		k.persisted = !removed
	}
	if out.Count() == 0 { // the empty chunk ends the round
		for _, k := range w.dirty {
			k.dirty = false
			if len(k.windows) == 0 {
				delete(w.keys, k.key)
			}
		}
		clear(w.dirty) // no reference to a forgotten key stays behind
		w.dirty, w.cursor = w.dirty[:0], 0
	}
	return nil
}

func (w *windowCount) Restore(entries []StateEntry) error {
	for _, entry := range entries {
		if entry.Removed {
			return fmt.Errorf("go-window-count cannot restore removals")
		}
		value := entry.Value
		if len(value) < 9 || value[0] != stateVersion || (len(value)-9)%16 != 0 {
			return fmt.Errorf("go-window-count cannot restore an entry of %d bytes: expected state version %d (1 byte), window_ms and 16 bytes per window", len(value), stateVersion)
		}
		if written := int64(binary.LittleEndian.Uint64(value[1:])); written != w.windowMs {
			return fmt.Errorf("go-window-count state was written with window_ms = %d, this job has %d: keep the old window_ms or start without the old state", written, w.windowMs)
		}
		if w.keys[string(entry.Key)] != nil {
			return fmt.Errorf("go-window-count restored a key twice")
		}
		k := &keyState{key: string(entry.Key), persisted: true}
		w.keys[k.key] = k
		for at := 9; at < len(value); at += 16 {
			before := len(k.windows)
			count := w.count(k, int64(binary.LittleEndian.Uint64(value[at:])))
			if len(k.windows) == before {
				return fmt.Errorf("go-window-count restored a window twice")
			}
			*count = binary.LittleEndian.Uint64(value[at+8:])
		}
	}
	return nil
}

func (w *windowCount) Restored(watermark int64) error {
	w.watermark = max(w.watermark, watermark)
	return nil
}

// appendJSONString writes text as serde_json writes its lossy UTF-8 decoding: each
// maximal invalid subpart becomes one U+FFFD, as in Rust's from_utf8_lossy.
func appendJSONString(out, text []byte) []byte {
	const hex = "0123456789abcdef"
	out = append(out, '"')
	for len(text) > 0 {
		n, bad := utf8Sequence(text)
		if n == 0 {
			out = append(out, "\uFFFD"...)
			text = text[bad:]
			continue
		}
		switch c := text[0]; {
		case c == '"':
			out = append(out, `\"`...)
		case c == '\\':
			out = append(out, `\\`...)
		case c == '\n':
			out = append(out, `\n`...)
		case c == '\r':
			out = append(out, `\r`...)
		case c == '\t':
			out = append(out, `\t`...)
		case c == 0x08:
			out = append(out, `\b`...)
		case c == 0x0c:
			out = append(out, `\f`...)
		case c < 0x20:
			out = append(out, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			out = append(out, text[:n]...)
		}
		text = text[n:]
	}
	return append(out, '"')
}

// utf8Sequence is the length of the valid UTF-8 sequence text starts with, or 0 and
// the length of the invalid subpart to replace.
func utf8Sequence(text []byte) (int, int) {
	lead := text[0]
	lo, hi := byte(0x80), byte(0xbf)
	var want int
	switch {
	case lead < 0x80:
		return 1, 0
	case lead >= 0xc2 && lead <= 0xdf:
		want = 2
	case lead >= 0xe0 && lead <= 0xef:
		want = 3
		if lead == 0xe0 {
			lo = 0xa0
		} else if lead == 0xed {
			hi = 0x9f
		}
	case lead >= 0xf0 && lead <= 0xf4:
		want = 4
		if lead == 0xf0 {
			lo = 0x90
		} else if lead == 0xf4 {
			hi = 0x8f
		}
	default:
		return 0, 1
	}
	for i := 1; i < want; i++ {
		if i >= len(text) || text[i] < lo || text[i] > hi {
			return 0, i
		}
		lo, hi = 0x80, 0xbf
	}
	return want, 0
}
