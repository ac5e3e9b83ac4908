//! Test plugin for the host's side of weir:operator@0.3's inputs and outputs.
//! `init` keeps the names of the inputs and outputs it is given (config `inputs`,
//! a number, makes it refuse any other count). `process` on input `i` emits each
//! record with its value replaced by `<i>:<input name>:<value>`, to the output its
//! key names (a decimal number; a record without one goes to output 0), unchecked:
//! a key past the outputs is an index out of range; a record whose value is `panic`
//! makes it panic, which traps. Config `mode` bends the
//! `outputs` list it returns:
//!
//! - `exact` (default): one index per record;
//! - `implicit`: an empty list whenever every record goes to output 0;
//! - `short` / `long`: one index fewer / more than records;
//! - `extra`: an index even for an empty batch.
//!
//! `on-watermark` emits one record per output, value `<watermark>:<output name>`, each
//! to its own output. No state.

#[cfg(target_arch = "wasm32")]
mod component {
    use std::cell::RefCell;

    wit_bindgen::generate!({ world: "operator", path: "../../../wit/0.3" });

    use weir::operator::types::Entry;

    #[derive(Default)]
    struct Settings {
        inputs: Vec<String>,
        outputs: Vec<String>,
        mode: String,
    }

    thread_local! {
        static SETTINGS: RefCell<Settings> = RefCell::default();
    }

    fn slice(data: &[u8], offset: u32, len: u32) -> &[u8] {
        &data[offset as usize..][..len as usize]
    }

    /// A record as `(key, value, timestamp)`.
    type Record = (Option<Vec<u8>>, Vec<u8>, i64);

    /// The records of `batch`, to be packed again.
    fn records(batch: &Batch) -> Vec<Record> {
        batch
            .entries
            .iter()
            .map(|e| {
                let key = e.has_key.then(|| slice(&batch.data, e.key_offset, e.key_len).to_vec());
                (key, slice(&batch.data, e.value_offset, e.value_len).to_vec(), e.timestamp)
            })
            .collect()
    }

    fn pack(records: &[Record]) -> Batch {
        let mut data = Vec::new();
        let mut entries = Vec::new();
        for (key, value, timestamp) in records {
            let key_offset = data.len() as u32;
            data.extend_from_slice(key.as_deref().unwrap_or_default());
            let value_offset = data.len() as u32;
            data.extend_from_slice(value);
            entries.push(Entry {
                has_key: key.is_some(),
                key_offset,
                key_len: value_offset - key_offset,
                value_offset,
                value_len: value.len() as u32,
                timestamp: *timestamp,
            });
        }
        Batch { data, entries, headers: Vec::new() }
    }

    /// `outputs`, bent as config `mode` says.
    fn bend(mut outputs: Vec<u8>, mode: &str) -> Vec<u8> {
        match mode {
            "implicit" if outputs.iter().all(|&o| o == 0) => Vec::new(),
            "short" => {
                outputs.pop();
                outputs
            }
            "long" => {
                outputs.push(0);
                outputs
            }
            "extra" if outputs.is_empty() => vec![0],
            _ => outputs,
        }
    }

    struct BadPorts;

    impl Guest for BadPorts {
        fn init(config: Vec<(String, String)>, inputs: Vec<String>, outputs: Vec<String>) -> Result<(), String> {
            let get = |key: &str| config.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
            if let Some(want) = get("inputs") {
                let want: usize = want.parse().map_err(|e| format!("bad-ports: `inputs` = {want}: {e}"))?;
                if inputs.len() != want {
                    return Err(format!(
                        "bad-ports: needs {want} input(s), got {} ({})",
                        inputs.len(),
                        inputs.join(", ")
                    ));
                }
            }
            let mode = get("mode").unwrap_or_else(|| "exact".to_owned());
            SETTINGS.set(Settings { inputs, outputs, mode });
            Ok(())
        }

        fn process(input: u32, batch: Batch) -> Result<Emitted, String> {
            SETTINGS.with_borrow(|s| {
                let name = s.inputs.get(input as usize).map_or("?", String::as_str);
                let mut outputs = Vec::new();
                let mut echoed = Vec::new();
                for (key, value, timestamp) in records(&batch) {
                    assert!(value != b"panic", "bad-ports: panic record on input {input}");
                    let output = key
                        .as_deref()
                        .and_then(|k| std::str::from_utf8(k).ok()?.parse::<u8>().ok())
                        .unwrap_or(0);
                    outputs.push(output);
                    let mut echo = format!("{input}:{name}:").into_bytes();
                    echo.extend_from_slice(&value);
                    echoed.push((key, echo, timestamp));
                }
                Ok(Emitted { batch: pack(&echoed), outputs: bend(outputs, &s.mode) })
            })
        }

        fn on_watermark(watermark: i64) -> Result<Emitted, String> {
            SETTINGS.with_borrow(|s| {
                let fired: Vec<_> = s
                    .outputs
                    .iter()
                    .map(|name| (None, format!("{watermark}:{name}").into_bytes(), 0))
                    .collect();
                let outputs = (0..s.outputs.len()).map(|o| o as u8).collect();
                Ok(Emitted { batch: pack(&fired), outputs: bend(outputs, &s.mode) })
            })
        }

        fn snapshot(_max_bytes: u32) -> Result<StateChunk, String> {
            Ok(StateChunk { data: Vec::new(), entries: Vec::new() })
        }

        fn restore(_chunk: StateChunk) -> Result<(), String> {
            Ok(())
        }

        fn restored(_watermark: i64) -> Result<(), String> {
            Ok(())
        }
    }

    export!(BadPorts);
}
