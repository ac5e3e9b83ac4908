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
//! `snapshot` returns `snapshot_mb` MiB (config, default 0) of state.

#[cfg(target_arch = "wasm32")]
mod component {
    use std::io::Write;
    use std::sync::OnceLock;

    wit_bindgen::generate!({ world: "operator", path: "../../../wit" });

    use weir::operator::log::{Level, log};
    use weir::operator::types::Entry;

    struct Settings {
        copies: u32,
        bytes: u32,
        lines: u32,
        snapshot_mb: u32,
    }

    static SETTINGS: OnceLock<Settings> = OnceLock::new();

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
                snapshot_mb: number(&config, "snapshot_mb", 0)?,
            };
            let _ = SETTINGS.set(settings);
            Ok(())
        }

        fn process(mut batch: Batch) -> Result<Batch, String> {
            for index in 0..batch.entries.len() {
                let entry = batch.entries[index];
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

        fn snapshot() -> Result<Vec<u8>, String> {
            Ok(vec![0x5a; (settings().snapshot_mb as usize) << 20])
        }

        fn restore(_state: Vec<u8>) -> Result<(), String> {
            Ok(())
        }
    }

    export!(BadOutput);
}
