//! The snapshot files of `weir check --save-snapshot` and `--restore`: an operator's
//! keyed state as a checkpoint holds it (each key's latest entry) and the event time
//! it was taken at, as JSON with keys and values in hex (state is bytes).
//!
//! ```json
//! {"format":"weir-check-snapshot-1","plugin":"c-window-count.wasm","watermark":5000,
//!  "entries":[{"key":"61","value":"01e803000000000000"}]}
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use weir::chunk::MAX_ENTRY_BYTES;

const FORMAT: &str = "weir-check-snapshot-1";

/// Keyed state: each key's entry.
pub(super) type Image = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Serialize, Deserialize)]
struct File {
    format: String,
    /// The plugin file that wrote it (informative: any plugin may read it).
    plugin: String,
    /// Event time the state had reached: windows ending at or before it had fired.
    watermark: i64,
    entries: Vec<Entry>,
}

#[derive(Serialize, Deserialize)]
struct Entry {
    key: String,
    value: String,
}

pub(super) fn save(path: &Path, plugin: &Path, watermark: i64, image: &Image) -> anyhow::Result<()> {
    let file = File {
        format: FORMAT.to_owned(),
        plugin: plugin.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default(),
        watermark,
        entries: image
            .iter()
            .map(|(key, value)| Entry { key: hex(key), value: hex(value) })
            .collect(),
    };
    let text = serde_json::to_string(&file).expect("a snapshot file serializes");
    std::fs::write(path, text + "\n")
        .with_context(|| format!("cannot write the snapshot file {}", path.display()))
}

/// The state and watermark in `path`, with what is wrong and where if it is not a
/// snapshot file.
pub(super) fn load(path: &Path) -> anyhow::Result<(Image, i64)> {
    let context = || format!("snapshot file {}", path.display());
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read the {}", context()))?;
    let file: File = serde_json::from_str(&text)
        .with_context(|| format!("the {} is not a snapshot `weir check --save-snapshot` wrote", context()))?;
    if file.format != FORMAT {
        bail!("the {} has format `{}`; this weir reads `{FORMAT}`", context(), file.format);
    }
    let mut image = Image::new();
    for (at, entry) in file.entries.iter().enumerate() {
        let key = unhex(&entry.key).with_context(|| format!("entry {at} of the {}: its key", context()))?;
        let value =
            unhex(&entry.value).with_context(|| format!("entry {at} of the {}: its value", context()))?;
        let bytes = key.len() + value.len();
        if bytes > MAX_ENTRY_BYTES {
            bail!(
                "entry {at} of the {} holds {bytes} bytes of key and value, more than a job keeps \
                 per key ({MAX_ENTRY_BYTES}, one changelog record)",
                context()
            );
        }
        if image.insert(key, value).is_some() {
            bail!("entry {at} of the {} repeats key {}", context(), entry.key);
        }
    }
    Ok((image, file.watermark))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn unhex(text: &str) -> anyhow::Result<Vec<u8>> {
    let digits = text.as_bytes();
    if !digits.len().is_multiple_of(2) || !digits.iter().all(u8::is_ascii_hexdigit) {
        bail!("`{text}` is not hex: an even number of the digits 0-9 and a-f");
    }
    let value = |digit: u8| (digit as char).to_digit(16).expect("checked above") as u8;
    Ok(digits.chunks_exact(2).map(|pair| value(pair[0]) << 4 | value(pair[1])).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_image_loads_back_and_bad_files_say_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json");
        let image: Image = [(b"".to_vec(), vec![0, 255, 0xab]), (b"k\xff".to_vec(), vec![])].into();
        save(&path, Path::new("/x/op.wasm"), 42, &image).unwrap();
        assert_eq!(load(&path).unwrap(), (image, 42));
        let too_big = format!(
            r#"{{"format":"weir-check-snapshot-1","plugin":"","watermark":0,"entries":[{{"key":"61","value":"{}"}}]}}"#,
            "00".repeat(MAX_ENTRY_BYTES)
        );

        for (text, why) in [
            ("{", "not a snapshot"),
            (r#"{"format":"other","plugin":"","watermark":0,"entries":[]}"#, "format `other`"),
            (r#"{"format":"weir-check-snapshot-1","plugin":"","watermark":0,"entries":[{"key":"6","value":""}]}"#, "entry 0"),
            (r#"{"format":"weir-check-snapshot-1","plugin":"","watermark":0,"entries":[{"key":"aéb","value":""}]}"#, "is not hex"),
            (r#"{"format":"weir-check-snapshot-1","plugin":"","watermark":0,"entries":[{"key":"+1+2","value":""}]}"#, "is not hex"),
            (r#"{"format":"weir-check-snapshot-1","plugin":"","watermark":0,"entries":[{"key":"61","value":""},{"key":"61","value":"00"}]}"#, "repeats key 61"),
            (too_big.as_str(), "more than a job keeps per key (998995"),
        ] {
            std::fs::write(&path, text).unwrap();
            let err = format!("{:#}", load(&path).unwrap_err());
            assert!(err.contains(why) && err.contains("s.json"), "{err}");
        }
    }
}
