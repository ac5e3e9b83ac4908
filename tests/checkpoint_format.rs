//! A checkpoint written by an earlier weir still restores. The store in
//! `tests/fixtures/checkpoint-format-0` was written by weir at commit e4e419b (format 0:
//! JSON source entries, a shape without a format) running window-count at parallelism 2
//! over 60 records of 6 keys in one-hour windows, stopped by SIGTERM after its final
//! checkpoint. Today's decoder must read it, and today's plugin must restore it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use weir::checkpoint::layout::{self, Shape};
use weir::checkpoint::store::CheckpointStore;
use weir::operator::{Limits, OperatorInstance};

use crate::operator_common::{config, load, records};

const JOB: &str = "fixture-v0";
/// The checkpoint the fixture's last commit named.
const CHECKPOINT: u64 = 28;
const RECORDS: i64 = 60;
const KEYS: usize = 6;

/// A writable copy of the fixture: opening a store writes to it.
fn fixture_copy() -> tempfile::TempDir {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/checkpoint-format-0");
    let copy = tempfile::tempdir().expect("temp dir");
    for entry in std::fs::read_dir(&source).unwrap_or_else(|e| panic!("reading {}: {e}", source.display())) {
        let entry = entry.expect("a fixture file");
        let target: PathBuf = copy.path().join(entry.file_name());
        std::fs::copy(entry.path(), &target).expect("copying a fixture file");
    }
    copy
}

#[test]
fn a_format_0_checkpoint_decodes_and_restores_into_todays_plugin() {
    let dir = fixture_copy();
    let store = CheckpointStore::open(dir.path(), JOB).expect("the fixture opens as a store");
    let snapshot = layout::decode(&store.load(CHECKPOINT).expect("the fixture holds its checkpoint")).expect("decodes");

    assert_eq!(snapshot.format, 0);
    let shape = Shape { parallelism: 2, operators: vec!["count".into()], source_topic: "fixture-v0-in".into() };
    assert_eq!(snapshot.shape, shape);
    assert_eq!(snapshot.partitions.keys().copied().collect::<Vec<_>>(), [0, 1]);
    let read: i64 = snapshot.partitions.values().map(|p| p.next_offset).sum();
    assert_eq!(read, RECORDS, "every input record was read before the checkpoint");
    assert!(snapshot.partitions.values().all(|p| p.max_timestamp > 0), "{:?}", snapshot.partitions);

    let plugin = load("window-count");
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for (&(stage, subtask), state) in &snapshot.operators {
        assert_eq!(stage, 0);
        let label = format!("count[{subtask}]");
        let mut instance = OperatorInstance::new(&plugin, Limits::default(), config(&[("window_ms", "3600000")]), label)
            .expect("window-count starts");
        instance.restore(&state.guest).expect("today's window-count restores a format-0 snapshot");
        for (key, value, _) in records(&instance.on_watermark(i64::MAX).expect("fires")) {
            let count = value.rsplit("\"count\":").next().and_then(|n| n.trim_end_matches('}').parse::<u64>().ok());
            *counts.entry(key.expect("keyed output")).or_default() += count.unwrap_or_else(|| panic!("no count in {value}"));
        }
    }
    assert_eq!(snapshot.operators.len(), 2, "one entry per subtask");
    assert_eq!(counts.len(), KEYS, "{counts:?}");
    assert_eq!(counts.values().sum::<u64>(), RECORDS as u64, "{counts:?}");
}
