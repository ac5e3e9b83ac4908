//! Test plugin for the host's bounds on what a plugin hands back. `process` passes
//! records through, except by value:
//!
//! - `amplify`: returns `copies` records (config, default 300) whose values all point
//!   at the same `bytes`-long buffer (config, default 16 MiB): little guest memory,
//!   gigabytes once each record is copied out;
//! - `timestamp:<n>`: the record with its timestamp replaced by `n`;
//! - `flood`: writes `lines` lines (config, default 10,000) of 4 KB to stdout, one
//!   40 MB line, and as many 4 KB `log` messages, then passes the record through.
//!
//! `snapshot` misbehaves as config `state` says (default: no state):
//!
//! - `big:<mb>`: one entry of `<mb>` MiB under key `big`, once;
//! - `outside`: an entry whose value lies outside the chunk's data;
//! - `twice`: the first key processed since the last round, twice in one round;
//! - `foreign`: key `k` in every round, though only one subtask owns its key group;
//! - `endless`: a round that never ends (every chunk holds an entry);
//! - `keys`: an entry for every key processed since the last round, as a real
//!   keyed operator does (the host checks that each belongs to the subtask);
//! - `alias:<n>`: one chunk of `max-bytes` of data and `n` distinct keys whose values
//!   all are the whole of it: within `max-bytes` as data, `n` times over it as entries;
//! - `removal-value`: a removal whose value points at 0xFFFFFF00, past any data;
//! - `padded:<mb>`: a chunk of `<mb>` MiB of data and no entries, which would end the
//!   round;
//! - `many:<n>:<kib>`: a valid round of `n` keys of `<kib>` KiB each, in chunks within
//!   `max-bytes` (`restore` accepts any chunk and keeps nothing).

#[cfg(target_arch = "wasm32")]
mod component {
    use std::io::Write;
    use std::sync::OnceLock;

    wit_bindgen::generate!({ world: "operator", path: "../../../wit" });

    use std::cell::RefCell;

    use weir::operator::log::{Level, log};
    use weir::operator::types::{Entry, StateEntry};

    struct Settings {
        copies: u32,
        bytes: u32,
        lines: u32,
        state: String,
    }

    static SETTINGS: OnceLock<Settings> = OnceLock::new();

    thread_local! {
        /// Keys seen since the last snapshot round (mode `keys`), and whether the
        /// current round has handed over its one chunk.
        static SEEN: RefCell<(Vec<Vec<u8>>, bool)> = const { RefCell::new((Vec::new(), false)) };
        /// The next key of a `many` round.
        static NEXT: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    }

    fn chunk(entries: &[(&[u8], &[u8])]) -> StateChunk {
        let mut data = Vec::new();
        let mut list = Vec::new();
        for (key, value) in entries {
            let key_offset = data.len() as u32;
            data.extend_from_slice(key);
            let value_offset = data.len() as u32;
            data.extend_from_slice(value);
            list.push(StateEntry {
                key_offset,
                key_len: key.len() as u32,
                value_offset,
                value_len: value.len() as u32,
                removed: false,
            });
        }
        StateChunk { data, entries: list }
    }

    /// One chunk per round, then the empty chunk that ends it.
    fn once(make: impl FnOnce() -> StateChunk) -> StateChunk {
        let sent = SEEN.with_borrow_mut(|(_, sent)| {
            let was = *sent;
            *sent = !was;
            was
        });
        if sent { chunk(&[]) } else { make() }
    }

    /// `max_bytes` of data, four bytes per counter, and `n` entries: key `i` is counter
    /// `i`, every value the whole buffer.
    fn aliased(n: u32, max_bytes: u32) -> StateChunk {
        let data: Vec<u8> = (0..max_bytes / 4).flat_map(u32::to_le_bytes).collect();
        let entries = (0..n.min(max_bytes / 4))
            .map(|i| StateEntry {
                key_offset: 4 * i,
                key_len: 4,
                value_offset: 0,
                value_len: data.len() as u32,
                removed: false,
            })
            .collect();
        StateChunk { data, entries }
    }

    /// The next chunk of a round of `n` keys `k<i>` with `kib` KiB values.
    fn many(n: u32, kib: usize, max_bytes: u32) -> StateChunk {
        let value = vec![0x6d; kib << 10];
        let mut keys = Vec::new();
        let mut bytes = 0;
        let mut next = NEXT.get();
        while next < n {
            let key = format!("k{next:010}");
            if !keys.is_empty() && bytes + key.len() + value.len() > max_bytes as usize {
                break;
            }
            bytes += key.len() + value.len();
            keys.push(key);
            next += 1;
        }
        NEXT.set(if keys.is_empty() { 0 } else { next });
        let entries: Vec<(&[u8], &[u8])> = keys.iter().map(|key| (key.as_bytes(), &value[..])).collect();
        chunk(&entries)
    }

    fn parse<T: std::str::FromStr>(state: &str, part: Option<&str>) -> Result<T, String> {
        part.and_then(|part| part.parse().ok())
            .ok_or_else(|| format!("bad-output: state {state}: expected numbers after the mode"))
    }

    fn settings() -> &'static Settings {
        SETTINGS.get().expect("init ran")
    }

    fn number(config: &[(String, String)], key: &str, default: u32) -> Result<u32, String> {
        match config.iter().find(|(k, _)| k == key) {
            Some((_, v)) => v.parse().map_err(|e| format!("bad-output: `{key}` = {v}: {e}")),
            None => Ok(default),
        }
    }

    /// One entry per copy, every value the whole of `data`.
    fn amplified() -> Batch {
        let s = settings();
        let data = vec![b'a'; s.bytes as usize];
        let entry = Entry {
            has_key: false,
            key_offset: 0,
            key_len: 0,
            value_offset: 0,
            value_len: s.bytes,
            timestamp: 1,
        };
        Batch {
            data,
            entries: vec![entry; s.copies as usize],
            headers: Vec::new(),
        }
    }

    fn flood() {
        let lines = settings().lines;
        let line = format!("{}\n", "f".repeat(4095));
        let mut out = std::io::stdout();
        for _ in 0..lines {
            let _ = out.write_all(line.as_bytes());
            log(Level::Info, &line[..4095]);
        }
        let _ = out.write_all(&vec![b'L'; 40 << 20]);
        let _ = out.write_all(b"\n");
        let _ = out.flush();
    }

    struct BadOutput;

    impl Guest for BadOutput {
        fn init(config: Vec<(String, String)>) -> Result<(), String> {
            let settings = Settings {
                copies: number(&config, "copies", 300)?,
                bytes: number(&config, "bytes", 16 << 20)?,
                lines: number(&config, "lines", 10_000)?,
                state: config
                    .iter()
                    .find(|(k, _)| k == "state")
                    .map_or_else(String::new, |(_, v)| v.clone()),
            };
            let _ = SETTINGS.set(settings);
            Ok(())
        }

        fn process(mut batch: Batch) -> Result<Batch, String> {
            for index in 0..batch.entries.len() {
                let entry = batch.entries[index];
                if matches!(settings().state.as_str(), "keys" | "twice") {
                    let key = &batch.data[entry.key_offset as usize..][..entry.key_len as usize];
                    SEEN.with_borrow_mut(|(seen, _)| seen.push(key.to_vec()));
                }
                let start = entry.value_offset as usize;
                let value = &batch.data[start..start + entry.value_len as usize];
                if value == b"amplify" {
                    return Ok(amplified());
                }
                if value == b"flood" {
                    flood();
                } else if let Some(n) = value.strip_prefix(b"timestamp:") {
                    let n = std::str::from_utf8(n).map_err(|e| e.to_string())?;
                    batch.entries[index].timestamp = n.parse().map_err(|e| format!("{n}: {e}"))?;
                }
            }
            Ok(batch)
        }

        fn on_watermark(_watermark: i64) -> Result<Batch, String> {
            Ok(Batch {
                data: Vec::new(),
                entries: Vec::new(),
                headers: Vec::new(),
            })
        }

        fn snapshot(max_bytes: u32) -> Result<StateChunk, String> {
            let state = settings().state.as_str();
            let mut parts = state.split(':');
            match (parts.next(), parts.next(), parts.next()) {
                (Some("big"), mb, None) => {
                    let mb: usize = parse(state, mb)?;
                    return Ok(once(|| chunk(&[(b"big", &vec![0x5a; mb << 20])])));
                }
                (Some("alias"), n, None) => {
                    let n = parse(state, n)?;
                    return Ok(once(|| aliased(n, max_bytes)));
                }
                (Some("padded"), mb, None) => {
                    let mb: usize = parse(state, mb)?;
                    return Ok(StateChunk { data: vec![0x70; mb << 20], entries: Vec::new() });
                }
                (Some("many"), n, kib) => return Ok(many(parse(state, n)?, parse(state, kib)?, max_bytes)),
                _ => {}
            }
            Ok(match state {
                "outside" => once(|| {
                    let mut outside = chunk(&[(b"k", b"v")]);
                    outside.entries[0].value_len = 1 << 20;
                    outside
                }),
                "twice" => once(|| {
                    let seen = SEEN.with_borrow_mut(|(seen, _)| std::mem::take(seen));
                    match seen.first() {
                        Some(key) => chunk(&[(key, b"1"), (key, b"2")]),
                        None => chunk(&[]),
                    }
                }),
                "foreign" => once(|| chunk(&[(b"k", b"v")])),
                "removal-value" => once(|| {
                    let mut removal = chunk(&[(b"k", b"")]);
                    removal.entries[0].removed = true;
                    removal.entries[0].value_offset = 0xFFFF_FF00;
                    removal.entries[0].value_len = 16;
                    removal
                }),
                "endless" => chunk(&[(b"k", b"v")]),
                "keys" => once(|| {
                    let mut seen = SEEN.with_borrow_mut(|(seen, _)| std::mem::take(seen));
                    seen.sort();
                    seen.dedup();
                    let entries: Vec<(&[u8], &[u8])> = seen.iter().map(|k| (&k[..], &b"v"[..])).collect();
                    chunk(&entries)
                }),
                _ => chunk(&[]),
            })
        }

        fn restore(_chunk: StateChunk) -> Result<(), String> {
            Ok(())
        }

        fn restored(_watermark: i64) -> Result<(), String> {
            Ok(())
        }
    }

    export!(BadOutput);
}
