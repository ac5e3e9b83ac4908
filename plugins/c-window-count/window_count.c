// c-window-count: window-count written in C against weir:operator@0.2. Counts records
// per key in tumbling event-time windows aligned to epoch 0 and emits, once the
// watermark reaches a window's end, exactly what the Rust window-count emits (see
// plugins/README.md). Each key's state is its open windows; a snapshot returns the
// keys changed since the last one. Ownership rules of the bindings: README.md.

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "operator.h"

// ---------------------------------------------------------------------------------
// Growable byte and entry buffers: results handed to the host are heap memory that
// the bindings free after the host has copied them (the post-return functions).

typedef struct {
  uint8_t *ptr;
  size_t len, cap;
} bytes_t;

static void *grow(void *ptr, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return ptr;
  size_t cap2 = *cap ? *cap : 4;
  while (cap2 < need) {
    if (cap2 > SIZE_MAX / 2) abort();  // beyond a 32-bit address space
    cap2 *= 2;
  }
  if (cap2 > SIZE_MAX / elem) abort();
  void *grown = realloc(ptr, cap2 * elem);
  if (!grown) abort();  // out of the instance's memory limit: the host reports a trap
  *cap = cap2;
  return grown;
}

static void bytes_append(bytes_t *b, const void *src, size_t n) {
  b->ptr = grow(b->ptr, &b->cap, b->len + n, 1);
  memcpy(b->ptr + b->len, src, n);
  b->len += n;
}

static void bytes_str(bytes_t *b, const char *s) { bytes_append(b, s, strlen(s)); }

static void bytes_i64(bytes_t *b, int64_t v) {
  char text[24];
  int n = snprintf(text, sizeof text, "%lld", (long long)v);
  bytes_append(b, text, (size_t)n);
}

static void bytes_u64(bytes_t *b, uint64_t v) {
  char text[24];
  int n = snprintf(text, sizeof text, "%llu", (unsigned long long)v);
  bytes_append(b, text, (size_t)n);
}

static void bytes_le64(bytes_t *b, uint64_t v) {
  uint8_t raw[8];
  for (int i = 0; i < 8; i++) raw[i] = (uint8_t)(v >> (8 * i));
  bytes_append(b, raw, 8);
}

static uint64_t read_le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

// Sets `err` to a heap copy of `message`: the bindings free an error after the call,
// so a string literal must never be handed over as is.
static bool fail(operator_string_t *err, const char *message) {
  operator_string_dup(err, message);
  return false;
}

// ---------------------------------------------------------------------------------
// JSON strings exactly as serde_json writes a lossily decoded key: invalid UTF-8
// becomes U+FFFD once per maximal invalid subpart, as Rust's from_utf8_lossy does.

// The length of the valid UTF-8 sequence at s[0..n], or 0 with *bad set to the length
// of the invalid subpart to replace.
static size_t utf8_sequence(const uint8_t *s, size_t n, size_t *bad) {
  uint8_t lead = s[0];
  size_t want;
  uint8_t lo = 0x80, hi = 0xbf;
  if (lead < 0x80) return 1;
  if (lead >= 0xc2 && lead <= 0xdf) want = 2;
  else if (lead >= 0xe0 && lead <= 0xef) {
    want = 3;
    if (lead == 0xe0) lo = 0xa0;
    if (lead == 0xed) hi = 0x9f;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    want = 4;
    if (lead == 0xf0) lo = 0x90;
    if (lead == 0xf4) hi = 0x8f;
  } else {
    *bad = 1;
    return 0;
  }
  for (size_t i = 1; i < want; i++) {
    uint8_t c = i < n ? s[i] : 0;
    if (i >= n || c < lo || c > hi) {
      *bad = i;
      return 0;
    }
    lo = 0x80, hi = 0xbf;
  }
  return want;
}

static void bytes_json_string(bytes_t *b, const uint8_t *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  bytes_str(b, "\"");
  size_t at = 0;
  while (at < n) {
    size_t bad = 0, len = utf8_sequence(s + at, n - at, &bad);
    if (len == 0) {
      bytes_str(b, "\xef\xbf\xbd");
      at += bad;
      continue;
    }
    uint8_t c = s[at];
    if (c == '"') bytes_str(b, "\\\"");
    else if (c == '\\') bytes_str(b, "\\\\");
    else if (c == '\n') bytes_str(b, "\\n");
    else if (c == '\r') bytes_str(b, "\\r");
    else if (c == '\t') bytes_str(b, "\\t");
    else if (c == 0x08) bytes_str(b, "\\b");
    else if (c == 0x0c) bytes_str(b, "\\f");
    else if (c < 0x20) {
      char esc[7] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 0xf], 0};
      bytes_str(b, esc);
    } else bytes_append(b, s + at, len);
    at += len;
  }
  bytes_str(b, "\"");
}

// ---------------------------------------------------------------------------------
// Keys and their open windows: a chained hash table of keys, each with its windows
// sorted by start.

typedef struct {
  int64_t start;
  uint64_t count;
} window_t;

typedef struct key_state {
  struct key_state *next;  // the hash chain
  uint32_t hash;
  bool dirty;      // changed since the last snapshot: in `dirty_keys`
  bool persisted;  // the host holds an entry for it (so emptying it is a removal)
  window_t *windows;
  size_t n_windows, cap_windows;
  size_t key_len;
  uint8_t key[];
} key_state_t;

#define MAX_WINDOW_MS ((int64_t)1 << 40)
#define STATE_VERSION 1
#define NO_WATERMARK INT64_MIN

static int64_t window_ms;
static int64_t watermark = NO_WATERMARK;  // the highest fired: windows ending there are gone
static int64_t earliest_end = INT64_MAX;  // no open window ends before it
static uint64_t late_records;
static key_state_t **buckets;
static size_t n_buckets, n_keys;
static key_state_t **dirty_keys;
static size_t n_dirty, cap_dirty, snapshot_cursor;

static uint32_t hash_key(const uint8_t *key, size_t len) {
  uint32_t h = 2166136261u;  // FNV-1a
  for (size_t i = 0; i < len; i++) h = (h ^ key[i]) * 16777619u;
  return h;
}

static void rehash(void) {
  size_t grown = n_buckets ? n_buckets * 2 : 1024;
  key_state_t **fresh = calloc(grown, sizeof *fresh);
  if (!fresh) abort();
  for (size_t i = 0; i < n_buckets; i++) {
    for (key_state_t *k = buckets[i], *next; k; k = next) {
      next = k->next;
      k->next = fresh[k->hash & (grown - 1)];
      fresh[k->hash & (grown - 1)] = k;
    }
  }
  free(buckets);
  buckets = fresh;
  n_buckets = grown;
}

static key_state_t *find_key(const uint8_t *key, size_t len, uint32_t hash) {
  if (!n_buckets) return NULL;
  for (key_state_t *k = buckets[hash & (n_buckets - 1)]; k; k = k->next) {
    if (k->hash == hash && k->key_len == len && memcmp(k->key, key, len) == 0) return k;
  }
  return NULL;
}

static key_state_t *insert_key(const uint8_t *key, size_t len, uint32_t hash) {
  if (n_keys >= n_buckets) rehash();
  key_state_t *k = calloc(1, sizeof *k + len);
  if (!k) abort();
  memcpy(k->key, key, len);
  k->key_len = len;
  k->hash = hash;
  k->next = buckets[hash & (n_buckets - 1)];
  buckets[hash & (n_buckets - 1)] = k;
  n_keys++;
  return k;
}

static void remove_key(key_state_t *gone) {
  key_state_t **link = &buckets[gone->hash & (n_buckets - 1)];
  while (*link != gone) link = &(*link)->next;
  *link = gone->next;
  n_keys--;
  free(gone->windows);
  free(gone);
}

static void mark_dirty(key_state_t *k) {
  if (k->dirty) return;
  k->dirty = true;
  dirty_keys = grow(dirty_keys, &cap_dirty, n_dirty + 1, sizeof *dirty_keys);
  dirty_keys[n_dirty++] = k;
}

static int64_t window_end(int64_t start) {
  return start > INT64_MAX - window_ms ? INT64_MAX : start + window_ms;
}

// The count of `k`'s window starting at `start`, created if missing.
static uint64_t *window_count(key_state_t *k, int64_t start) {
  size_t at = k->n_windows;
  while (at > 0 && k->windows[at - 1].start > start) at--;  // in-order records: at once
  if (at > 0 && k->windows[at - 1].start == start) return &k->windows[at - 1].count;
  k->windows = grow(k->windows, &k->cap_windows, k->n_windows + 1, sizeof *k->windows);
  memmove(&k->windows[at + 1], &k->windows[at], (k->n_windows - at) * sizeof *k->windows);
  k->windows[at] = (window_t){start, 0};
  k->n_windows++;
  if (window_end(start) < earliest_end) earliest_end = window_end(start);
  return &k->windows[at].count;
}

// ---------------------------------------------------------------------------------
// The exports.

bool exports_operator_init(operator_list_tuple2_string_string_t *config, operator_string_t *err) {
  char message[256];
  bool have_window = false;
  bool ok = true;
  for (size_t i = 0; i < config->len && ok; i++) {
    operator_string_t *name = &config->ptr[i].f0, *value = &config->ptr[i].f1;
    if (name->len != 9 || memcmp(name->ptr, "window_ms", 9) != 0) {
      snprintf(message, sizeof message,
               "operator config has unknown key `%.*s`; this operator knows: window_ms",
               (int)(name->len > 64 ? 64 : name->len), (const char *)name->ptr);
      ok = fail(err, message);
      break;
    }
    // Surrounding whitespace is ignored, as the Rust SDK does.
    const uint8_t *digits = value->ptr;
    size_t len = value->len;
    while (len > 0 && isspace(digits[0])) digits++, len--;
    while (len > 0 && isspace(digits[len - 1])) len--;
    char text[32] = {0};
    char *end = NULL;
    if (len < sizeof text) memcpy(text, digits, len);
    errno = 0;
    long long parsed = len < sizeof text ? strtoll(text, &end, 10) : 0;
    if (len == 0 || len >= sizeof text || *end != 0 ||
        errno != 0 || parsed <= 0 || parsed > MAX_WINDOW_MS) {
      snprintf(message, sizeof message,
               "operator config `window_ms` = `%.*s` is not a positive integer of milliseconds "
               "at most %lld, e.g. 60000",
               (int)(value->len > 64 ? 64 : value->len), (const char *)value->ptr,
               (long long)MAX_WINDOW_MS);
      ok = fail(err, message);
      break;
    }
    window_ms = parsed;
    have_window = true;
  }
  // The arguments belong to the plugin: free them whatever the outcome.
  operator_list_tuple2_string_string_free(config);
  if (ok && !have_window) {
    ok = fail(err, "operator config `window_ms` is missing: set it to a positive integer of "
                   "milliseconds, e.g. 60000, under [operators.config]");
  }
  return ok;
}

bool exports_operator_process(operator_batch_t *batch, operator_batch_t *ret,
                              operator_string_t *err) {
  (void)err;
  for (size_t i = 0; i < batch->entries.len; i++) {
    const weir_operator_types_entry_t *e = &batch->entries.ptr[i];
    int64_t ts = e->timestamp;
    int64_t rem = ts % window_ms;
    if (rem < 0) rem += window_ms;
    // Unsigned: near INT64_MIN the start wraps (as Rust's does) instead of being undefined.
    int64_t start = (int64_t)((uint64_t)ts - (uint64_t)rem);
    if (window_end(start) <= watermark) {  // its window has fired: late, dropped
      late_records++;
      continue;
    }
    const uint8_t *key = batch->data.ptr + e->key_offset;
    size_t len = e->has_key ? e->key_len : 0;
    uint32_t hash = hash_key(key, len);
    key_state_t *k = find_key(key, len, hash);
    if (!k) k = insert_key(key, len, hash);
    *window_count(k, start) += 1;
    mark_dirty(k);
  }
  operator_batch_free(batch);
  *ret = (operator_batch_t){0};  // nothing is emitted before a watermark
  return true;
}

typedef struct {
  int64_t start;
  uint64_t count;
  const key_state_t *key;
} fired_t;

static int fired_order(const void *a, const void *b) {
  const fired_t *x = a, *y = b;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  size_t n = x->key->key_len < y->key->key_len ? x->key->key_len : y->key->key_len;
  int by_bytes = memcmp(x->key->key, y->key->key, n);
  if (by_bytes) return by_bytes;
  return x->key->key_len < y->key->key_len ? -1 : x->key->key_len > y->key->key_len;
}

// Emits one record per (key, window) that `fired` holds, ordered by window end (all
// windows are the same size, so by start), then key bytes.
static void emit(fired_t *fired, size_t n, operator_batch_t *ret) {
  qsort(fired, n, sizeof *fired, fired_order);
  bytes_t data = {0};
  weir_operator_types_entry_t *entries = malloc(n * sizeof *entries);
  if (!entries) abort();
  for (size_t i = 0; i < n; i++) {
    int64_t end = window_end(fired[i].start);
    size_t key_at = data.len;
    bytes_append(&data, fired[i].key->key, fired[i].key->key_len);
    size_t value_at = data.len;
    bytes_str(&data, "{\"key\":");
    bytes_json_string(&data, fired[i].key->key, fired[i].key->key_len);
    bytes_str(&data, ",\"window_start\":");
    bytes_i64(&data, fired[i].start);
    bytes_str(&data, ",\"window_end\":");
    bytes_i64(&data, end);
    bytes_str(&data, ",\"count\":");
    bytes_u64(&data, fired[i].count);
    bytes_str(&data, "}");
    entries[i] = (weir_operator_types_entry_t){
        .has_key = true,
        .key_offset = (uint32_t)key_at,
        .key_len = (uint32_t)fired[i].key->key_len,
        .value_offset = (uint32_t)value_at,
        .value_len = (uint32_t)(data.len - value_at),
        .timestamp = end - 1,
    };
  }
  ret->data = (operator_list_u8_t){data.ptr, data.len};
  ret->entries = (weir_operator_types_list_entry_t){entries, n};
  ret->headers = (weir_operator_types_list_header_t){0};
}

bool exports_operator_on_watermark(int64_t to, operator_batch_t *ret, operator_string_t *err) {
  (void)err;
  *ret = (operator_batch_t){0};
  if (to > watermark) watermark = to;
  if (earliest_end > to) return true;  // nothing ends yet: the common case, no scan
  fired_t *fired = NULL;
  size_t n_fired = 0, cap_fired = 0;
  int64_t next_end = INT64_MAX;
  for (size_t b = 0; b < n_buckets; b++) {
    for (key_state_t *k = buckets[b]; k; k = k->next) {
      size_t done = 0;
      while (done < k->n_windows && window_end(k->windows[done].start) <= to) {
        fired = grow(fired, &cap_fired, n_fired + 1, sizeof *fired);
        fired[n_fired++] = (fired_t){k->windows[done].start, k->windows[done].count, k};
        done++;
      }
      if (done == 0) {
        if (k->n_windows && window_end(k->windows[0].start) < next_end)
          next_end = window_end(k->windows[0].start);
        continue;
      }
      memmove(k->windows, &k->windows[done], (k->n_windows - done) * sizeof *k->windows);
      k->n_windows -= done;
      if (k->n_windows && window_end(k->windows[0].start) < next_end)
        next_end = window_end(k->windows[0].start);
      mark_dirty(k);
    }
  }
  earliest_end = next_end;
  if (n_fired) emit(fired, n_fired, ret);
  free(fired);
  // Keys left without windows stay until the next snapshot has reported them.
  return true;
}

// A key's entry: the state version, window_ms (a restore with another is refused),
// then each open window's start and count, little-endian.
static void append_state(bytes_t *data, const key_state_t *k) {
  uint8_t version = STATE_VERSION;
  bytes_append(data, &version, 1);
  bytes_le64(data, (uint64_t)window_ms);
  for (size_t i = 0; i < k->n_windows; i++) {
    bytes_le64(data, (uint64_t)k->windows[i].start);
    bytes_le64(data, k->windows[i].count);
  }
}

// Ends a snapshot round: the changed keys are reported, emptied ones can go.
static void end_round(void) {
  for (size_t i = 0; i < n_dirty; i++) {
    key_state_t *k = dirty_keys[i];
    k->dirty = false;
    if (k->n_windows == 0) remove_key(k);
  }
  n_dirty = 0;
  snapshot_cursor = 0;
}

bool exports_operator_snapshot(uint32_t max_bytes, operator_state_chunk_t *ret,
                               operator_string_t *err) {
  (void)err;
  bytes_t data = {0};
  weir_operator_types_state_entry_t *entries = NULL;
  size_t n = 0, cap = 0;
  while (snapshot_cursor < n_dirty) {
    key_state_t *k = dirty_keys[snapshot_cursor];
    if (k->n_windows == 0 && !k->persisted) {  // born and emptied between snapshots
      snapshot_cursor++;
      continue;
    }
    size_t size = k->key_len + (k->n_windows ? 9 + 16 * k->n_windows : 0);
    if (n > 0 && data.len + size > max_bytes) break;  // the next call takes it
    entries = grow(entries, &cap, n + 1, sizeof *entries);
    weir_operator_types_state_entry_t *e = &entries[n++];
    e->key_offset = (uint32_t)data.len;
    e->key_len = (uint32_t)k->key_len;
    bytes_append(&data, k->key, k->key_len);
    e->removed = k->n_windows == 0;
    e->value_offset = e->removed ? 0 : (uint32_t)data.len;
    if (!e->removed) append_state(&data, k);
    e->value_len = e->removed ? 0 : (uint32_t)(data.len - e->value_offset);
    k->persisted = !e->removed;
    snapshot_cursor++;
  }
  if (n == 0) end_round();  // the empty chunk ends the round
  ret->data = (operator_list_u8_t){data.ptr, data.len};
  ret->entries = (weir_operator_types_list_state_entry_t){entries, n};
  return true;
}

static bool restore_entry(const uint8_t *key, size_t key_len, const uint8_t *value, size_t len,
                          operator_string_t *err) {
  char message[160];
  if (len < 9 || value[0] != STATE_VERSION || (len - 9) % 16 != 0) {
    snprintf(message, sizeof message,
             "c-window-count cannot restore an entry of %zu bytes: expected state version %d "
             "(1 byte), window_ms and 16 bytes per window",
             len, STATE_VERSION);
    return fail(err, message);
  }
  int64_t written_ms = (int64_t)read_le64(value + 1);
  if (written_ms != window_ms) {
    snprintf(message, sizeof message,
             "c-window-count state was written with window_ms = %lld, this job has %lld: "
             "keep the old window_ms or start without the old state",
             (long long)written_ms, (long long)window_ms);
    return fail(err, message);
  }
  uint32_t hash = hash_key(key, key_len);
  if (find_key(key, key_len, hash)) return fail(err, "c-window-count restored a key twice");
  key_state_t *k = insert_key(key, key_len, hash);
  k->persisted = true;
  for (size_t at = 9; at < len; at += 16) {
    int64_t start = (int64_t)read_le64(value + at);
    size_t before = k->n_windows;
    uint64_t *count = window_count(k, start);
    if (k->n_windows == before) return fail(err, "c-window-count restored a window twice");
    *count = read_le64(value + at + 8);
  }
  return true;
}

bool exports_operator_restore(operator_state_chunk_t *chunk, operator_string_t *err) {
  bool ok = true;
  for (size_t i = 0; i < chunk->entries.len && ok; i++) {
    const weir_operator_types_state_entry_t *e = &chunk->entries.ptr[i];
    if (e->removed) {
      ok = fail(err, "c-window-count cannot restore removals");
      break;
    }
    ok = restore_entry(chunk->data.ptr + e->key_offset, e->key_len,
                       chunk->data.ptr + e->value_offset, e->value_len, err);
  }
  operator_state_chunk_free(chunk);
  return ok;
}

bool exports_operator_restored(int64_t at, operator_string_t *err) {
  (void)err;
  if (at > watermark) watermark = at;
  return true;
}
