// The component model's canonical ABI for the weir:operator@0.2 world, written by
// hand for the standard Go toolchain (go:wasmexport and go:wasmimport take only
// numbers and pointers; no generator targets it). The operator itself is in
// operator.go and sees Go values only.
//
// Memory: the host writes each call's arguments into room it asks `cabi_realloc`
// for, valid until the call returns (an operator copies what it keeps). Go's garbage
// collector does not see addresses held by the host, so that room stays reachable
// (argumentArena, arguments) and every result the host copies out after a call is
// kept in `results` until the next call.
// The collector runs only inside exports: `cabi_realloc` runs where the component
// model forbids calling imports, and a collection reads the clock (an import), so
// between calls it is switched off (see endCall).

package main

import (
	"encoding/binary"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"unsafe"
)

// adapterArena is room for the WASI adapter's state and stack, which it cannot take
// from Go's heap: weir-guest finds the array by the text it starts with and hands its
// bytes to the adapter. Go never writes to it.
var adapterArena = [256 << 10]byte{'w', 'e', 'i', 'r', '-', 'g', 'u', 'e', 's', 't', ' ',
	'a', 'd', 'a', 'p', 't', 'e', 'r', ' ', 'a', 'r', 'e', 'n', 'a', ',', ' ', '2', '5', '6', ' ',
	'K', 'i', 'B', 0}

// Keeps adapterArena in the module: the linker drops globals no code reads.
var adapterArenaMarker byte

// gcPercent is the collector's setting inside exports (Go's default).
const gcPercent = 100

func init() {
	adapterArenaMarker = adapterArena[0]
	runtime.MemProfileRate = 0
	debug.SetGCPercent(-1)
}

var (
	// Arguments the host asked room for: in argumentArena, reused by every call, or,
	// when a call needs more than it holds, in buffers of their own (and the arena
	// grows at the end of that call, where allocating is allowed to collect).
	argumentArena []uint64
	arenaUsed     int // words of the arena handed out in this call
	callNeeds     int // words asked for in this call
	arguments     [][]uint64
	results       [][]uint64
	// The return area: a result's discriminant at 0, its payload from offset 4.
	returnArea [8]uint32
)

// Allocation rounds up to 8-byte words: Go aligns them to 8, the largest alignment
// the world's types need.
func words(size uint32) []uint64 { return make([]uint64, (size+7)/8) }

func asBytes(buffer []uint64, size uint32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&buffer[0])), size)
}

//go:wasmexport cabi_realloc
func cabiRealloc(old unsafe.Pointer, oldSize, align, newSize uint32) unsafe.Pointer {
	if newSize == 0 {
		return unsafe.Pointer(uintptr(align))
	}
	n := int((newSize + 7) / 8)
	callNeeds += n
	var buffer []uint64
	if arenaUsed+n <= len(argumentArena) {
		buffer = argumentArena[arenaUsed : arenaUsed+n : arenaUsed+n]
		arenaUsed += n
	} else {
		buffer = make([]uint64, n)
		arguments = append(arguments, buffer)
	}
	if old != nil && oldSize > 0 {
		copy(asBytes(buffer, newSize), unsafe.Slice((*byte)(old), min(oldSize, newSize)))
	}
	return unsafe.Pointer(&buffer[0])
}

// view is the host's bytes at ptr..ptr+size, valid until the call returns.
func view(ptr unsafe.Pointer, size uint32) []byte {
	if size == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(ptr), size)
}

// beginCall forgets the previous call's results (the host has copied them) and lets
// the collector run.
func beginCall() {
	clear(results) // truncating alone would keep the buffers reachable
	results = results[:0]
	debug.SetGCPercent(gcPercent)
}

// endCall releases the arguments the host allocated for this call and stops the
// collector until the next call. Switching it off waits for a running collection to
// end; one that ends while switched off leaves the scavenger paced to the heap in
// use, and the heap growing in cabi_realloc would then scavenge, reading the clock.
// A full collection with the collector on restores the pacing of a normal cycle,
// under which a switched-off collector never scavenges.
func endCall() {
	clear(arguments)
	arguments = arguments[:0]
	if callNeeds > len(argumentArena) {
		argumentArena = make([]uint64, callNeeds+callNeeds/2)
	}
	arenaUsed, callNeeds = 0, 0
	before := collections()
	debug.SetGCPercent(-1)
	if collections() != before {
		debug.SetGCPercent(gcPercent)
		runtime.GC()
		debug.SetGCPercent(-1)
	}
}

var cycles = []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}

// collections is how many collections have ended.
func collections() uint64 {
	metrics.Read(cycles)
	return cycles[0].Value.Uint64()
}

// keep hands bytes to the host: their address, valid until the next call.
func keep(data []byte) uint32 {
	if len(data) == 0 {
		return 0
	}
	buffer := words(uint32(len(data)))
	copy(asBytes(buffer, uint32(len(data))), data)
	results = append(results, buffer)
	return uint32(uintptr(unsafe.Pointer(&buffer[0])))
}

// result<_, string>, or result<T, string> with T's flat words in payload.
func returnResult(err error, payload ...uint32) unsafe.Pointer {
	returnArea = [8]uint32{}
	if err != nil {
		message := []byte(err.Error())
		returnArea[0] = 1
		returnArea[1] = keep(message)
		returnArea[2] = uint32(len(message))
	} else {
		copy(returnArea[1:], payload)
	}
	return unsafe.Pointer(&returnArea[0])
}

// Record is one input record: its key (nil without one), value and event time.
type Record struct {
	Key       []byte
	HasKey    bool
	Value     []byte
	Timestamp int64
}

// Output collects emitted records packed as a batch: keys and values back to back.
type Output struct {
	data    []byte
	entries []byte
}

// Emit appends a keyed record.
func (o *Output) Emit(key string, value []byte, timestamp int64) {
	var entry [32]byte
	entry[0] = 1 // has-key
	binary.LittleEndian.PutUint32(entry[4:], uint32(len(o.data)))
	binary.LittleEndian.PutUint32(entry[8:], uint32(len(key)))
	o.data = append(o.data, key...)
	binary.LittleEndian.PutUint32(entry[12:], uint32(len(o.data)))
	binary.LittleEndian.PutUint32(entry[16:], uint32(len(value)))
	o.data = append(o.data, value...)
	binary.LittleEndian.PutUint64(entry[24:], uint64(timestamp))
	o.entries = append(o.entries, entry[:]...)
}

func (o *Output) flat() []uint32 {
	return []uint32{keep(o.data), uint32(len(o.data)), keep(o.entries), uint32(len(o.entries) / 32), 0, 0}
}

// Reused from call to call, so that a call allocates little: every allocation brings
// the next collection closer, and a collection scans all of the operator's state.
var (
	records []Record
	emitted Output
	changes Chunk
)

// recordBuffer is room for n records, valid until the next call.
func recordBuffer(n int) []Record {
	if cap(records) < n {
		records = make([]Record, n)
	}
	return records[:n]
}

// output is an empty Output, valid until the next call (flat copies what it holds).
func output() *Output {
	emitted.data, emitted.entries = emitted.data[:0], emitted.entries[:0]
	return &emitted
}

// chunk is an empty Chunk, valid until the next call (flat copies what it holds).
func chunk() *Chunk {
	changes.data, changes.entries, changes.count = changes.data[:0], changes.entries[:0], 0
	return &changes
}

// StateEntry is one restored key's state (Removed: a removal, which restore refuses).
type StateEntry struct {
	Key     []byte
	Value   []byte
	Removed bool
}

// Chunk collects state entries packed as a state chunk: keys and values back to back.
type Chunk struct {
	data    []byte
	entries []byte
	count   int
}

// Put appends key's new state.
func (c *Chunk) Put(key string, value []byte) { c.add(key, value, false) }

// Remove appends key's removal.
func (c *Chunk) Remove(key string) { c.add(key, nil, true) }

func (c *Chunk) add(key string, value []byte, removed bool) {
	var entry [20]byte
	binary.LittleEndian.PutUint32(entry[0:], uint32(len(c.data)))
	binary.LittleEndian.PutUint32(entry[4:], uint32(len(key)))
	c.data = append(c.data, key...)
	if removed {
		entry[16] = 1
	} else {
		binary.LittleEndian.PutUint32(entry[8:], uint32(len(c.data)))
		binary.LittleEndian.PutUint32(entry[12:], uint32(len(value)))
		c.data = append(c.data, value...)
	}
	c.entries = append(c.entries, entry[:]...)
	c.count++
}

// Size is the bytes of keys and values so far; Count the entries.
func (c *Chunk) Size() int  { return len(c.data) }
func (c *Chunk) Count() int { return c.count }

func (c *Chunk) flat() []uint32 {
	return []uint32{keep(c.data), uint32(len(c.data)), keep(c.entries), uint32(c.count)}
}

//go:wasmimport weir:operator/log@0.2.0 log
func hostLog(level uint32, message unsafe.Pointer, size uint32)

// Log levels of the log interface.
const (
	LevelInfo = 2
	LevelWarn = 3
)

// Log writes one line to the host's log.
func Log(level uint32, message string) {
	bytes := []byte(message)
	if len(bytes) == 0 {
		bytes = []byte{' '}
	}
	hostLog(level, unsafe.Pointer(&bytes[0]), uint32(len(bytes)))
}

//go:wasmexport init
func exportInit(config unsafe.Pointer, count uint32) unsafe.Pointer {
	beginCall()
	defer endCall()
	pairs := view(config, count*16)
	entries := make(map[string]string, count)
	var names []string
	for i := uint32(0); i < count; i++ {
		word := func(at uint32) uint32 { return binary.LittleEndian.Uint32(pairs[i*16+at:]) }
		name := string(view(unsafe.Pointer(uintptr(word(0))), word(4)))
		entries[name] = string(view(unsafe.Pointer(uintptr(word(8))), word(12)))
		names = append(names, name)
	}
	return returnResult(operator.Init(entries, names))
}

//go:wasmexport process
func exportProcess(data unsafe.Pointer, dataLen uint32, entries unsafe.Pointer, count uint32, _ unsafe.Pointer, _ uint32) unsafe.Pointer {
	beginCall()
	defer endCall()
	bytes := view(data, dataLen)
	raw := view(entries, count*32)
	records := recordBuffer(int(count))
	for i := range records {
		entry := raw[i*32:]
		field := func(at int) uint32 { return binary.LittleEndian.Uint32(entry[at:]) }
		records[i] = Record{
			HasKey:    entry[0] != 0,
			Key:       bytes[field(4) : field(4)+field(8)],
			Value:     bytes[field(12) : field(12)+field(16)],
			Timestamp: int64(binary.LittleEndian.Uint64(entry[24:])),
		}
	}
	out := output()
	err := operator.Process(records, out)
	return returnResult(err, out.flat()...)
}

//go:wasmexport on-watermark
func exportOnWatermark(watermark int64) unsafe.Pointer {
	beginCall()
	defer endCall()
	out := output()
	err := operator.OnWatermark(watermark, out)
	return returnResult(err, out.flat()...)
}

//go:wasmexport snapshot
func exportSnapshot(maxBytes uint32) unsafe.Pointer {
	beginCall()
	defer endCall()
	out := chunk()
	err := operator.Snapshot(maxBytes, out)
	return returnResult(err, out.flat()...)
}

//go:wasmexport restore
func exportRestore(data unsafe.Pointer, dataLen uint32, entries unsafe.Pointer, count uint32) unsafe.Pointer {
	beginCall()
	defer endCall()
	bytes := view(data, dataLen)
	raw := view(entries, count*20)
	restored := make([]StateEntry, count)
	for i := range restored {
		entry := raw[i*20:]
		field := func(at int) uint32 { return binary.LittleEndian.Uint32(entry[at:]) }
		restored[i].Key = bytes[field(0) : field(0)+field(4)]
		restored[i].Removed = entry[16] != 0
		if !restored[i].Removed {
			restored[i].Value = bytes[field(8) : field(8)+field(12)]
		}
	}
	return returnResult(operator.Restore(restored))
}

//go:wasmexport restored
func exportRestored(watermark int64) unsafe.Pointer {
	beginCall()
	defer endCall()
	return returnResult(operator.Restored(watermark))
}

// A reactor: the host calls the exports; main never runs.
func main() {}
