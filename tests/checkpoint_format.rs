//! A checkpoint written by an earlier weir still reads. The store in
//! `tests/fixtures/checkpoint-format-0` was written by weir at commit e4e419b (format 0:
//! JSON source entries, a shape without a format) running window-count at parallelism 2
//! over 60 records of 6 keys in one-hour windows, stopped by SIGTERM after its final
//! checkpoint. Today's decoder must read it; its state is whole-subtask snapshots of
//! weir:operator@0.1 plugins, which recovery refuses by name (keyed state cannot be
//! rebuilt from them).

use std::path::{Path, PathBuf};

use weir::checkpoint::layout::{self, Shape};
use weir::checkpoint::store::CheckpointStore;

const JOB: &str = "fixture-v0";
/// The checkpoint the fixture's last commit named.
const CHECKPOINT: u64 = 28;
const RECORDS: i64 = 60;

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
fn a_format_0_checkpoint_still_decodes_with_its_whole_subtask_snapshots() {
    let dir = fixture_copy();
    let store = CheckpointStore::open(dir.path(), JOB).expect("the fixture opens as a store");
    let snapshot = layout::decode(&store.load(CHECKPOINT).expect("the fixture holds its checkpoint")).expect("decodes");

    assert_eq!(snapshot.format, 0);
    let shape = Shape {
        parallelism: 2,
        key_groups: None,
        operators: vec!["count".into()],
        source_topic: "fixture-v0-in".into(),
    };
    assert_eq!(snapshot.shape, shape, "no key groups: recovery refuses it by name");
    assert_eq!(snapshot.partitions.keys().copied().collect::<Vec<_>>(), [0, 1]);
    let read: i64 = snapshot.partitions.values().map(|p| p.next_offset).sum();
    assert_eq!(read, RECORDS, "every input record was read before the checkpoint");
    assert!(snapshot.partitions.values().all(|p| p.max_timestamp > 0), "{:?}", snapshot.partitions);
    assert_eq!(snapshot.operators.len(), 2, "one entry per subtask");
    for state in snapshot.operators.values() {
        assert!(state.guest.starts_with(b"WGST"), "a weir:operator@0.1 guest snapshot");
    }
}
