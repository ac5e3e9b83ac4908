//! The checkpoint store on a real RocksDB in a temporary directory: what is sealed loads back
//! exactly, damage is reported naming the task, a held directory is refused, and pruning,
//! discarding, copying and sharing a directory between jobs keep checkpoints apart.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use weir::checkpoint::store::{Checkpoint, CheckpointStore, StoreError};
use weir::state::{Change, FoldDurability, StateBase};

const JOB: &str = "clicks-per-user";
/// Set in a child process started by a test: what the child does (see `child_process_entry`).
const CHILD_ENV: &str = "WEIR_STORE_TEST_CHILD";
const CHILD_DEADLINE: Duration = Duration::from_secs(60);

fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("create a temporary directory")
}

/// The checkpoints `store` holds sealed among the ids these tests use: those `load` finds.
fn sealed(store: &CheckpointStore) -> Vec<u64> {
    let found = |n: u64| match store.load(n) {
        Ok(_) => true,
        Err(StoreError::Missing { .. }) => false,
        Err(error) => panic!("loading checkpoint {n}: {error}"),
    };
    (0..=32).filter(|&n| found(n)).collect()
}

fn open(dir: &Path) -> CheckpointStore {
    CheckpointStore::open(dir, JOB).expect("open the checkpoint store")
}

/// Puts `tasks` (name, bytes) into checkpoint `n` and seals it with `meta`.
fn write_checkpoint(store: &CheckpointStore, n: u64, tasks: &[(&str, &[u8])], meta: &[u8]) -> u64 {
    for (task, bytes) in tasks {
        store.put(n, task, bytes).expect("put a snapshot");
    }
    let names: Vec<&str> = tasks.iter().map(|(task, _)| *task).collect();
    store.seal(n, &names, meta).expect("seal the checkpoint")
}

fn three_tasks(n: u64) -> Vec<(&'static str, Vec<u8>)> {
    vec![
        (
            "source/0",
            format!("offsets of checkpoint {n}").into_bytes(),
        ),
        ("op/1/0", vec![n as u8; 10_000]),
        ("op/1/1", Vec::new()),
    ]
}

fn write_three(store: &CheckpointStore, n: u64) {
    let tasks = three_tasks(n);
    let refs: Vec<(&str, &[u8])> = tasks.iter().map(|(t, b)| (*t, b.as_slice())).collect();
    write_checkpoint(store, n, &refs, format!("meta {n}").as_bytes());
}

fn assert_three(store: &CheckpointStore, n: u64) {
    let loaded = store.load(n).expect("load the checkpoint");
    assert_eq!(loaded.n, n);
    assert_eq!(loaded.meta, format!("meta {n}").into_bytes());
    let expected: Vec<(String, Vec<u8>)> = three_tasks(n)
        .into_iter()
        .map(|(t, b)| (t.to_owned(), b))
        .collect();
    let found: Vec<(String, Vec<u8>)> = loaded.tasks.into_iter().collect();
    let mut expected_sorted = expected;
    expected_sorted.sort();
    assert_eq!(found, expected_sorted);
}

/// Rewrites the one raw RocksDB value whose key ends with `task`, with the store closed.
fn tamper(dir: &Path, task: &str, change: impl FnOnce(&mut Vec<u8>)) {
    let db = rocksdb::DB::open_default(dir).expect("open the store's RocksDB directly");
    let keys: Vec<Box<[u8]>> = db
        .iterator(rocksdb::IteratorMode::Start)
        .map(|item| item.expect("iterate").0)
        .filter(|key| key.ends_with(task.as_bytes()))
        .collect();
    assert_eq!(keys.len(), 1, "exactly one key ends with {task}");
    let mut value = db.get(&keys[0]).expect("get").expect("the value exists");
    change(&mut value);
    db.put(&keys[0], value).expect("put the tampered value");
}

fn delete_raw(dir: &Path, task: &str) {
    let db = rocksdb::DB::open_default(dir).expect("open the store's RocksDB directly");
    let key = db
        .iterator(rocksdb::IteratorMode::Start)
        .map(|item| item.expect("iterate").0)
        .find(|key| key.ends_with(task.as_bytes()))
        .expect("the task's key exists");
    db.delete(key).expect("delete the entry");
}

#[test]
fn round_trip() {
    let tmp = temp_dir();
    let store = open(tmp.path());
    let tasks = three_tasks(5);
    let refs: Vec<(&str, &[u8])> = tasks.iter().map(|(t, b)| (*t, b.as_slice())).collect();
    let total = write_checkpoint(&store, 5, &refs, b"meta 5");
    assert_eq!(
        total,
        tasks.iter().map(|(_, b)| b.len() as u64).sum::<u64>()
    );
    assert_three(&store, 5);
    assert_eq!(sealed(&store), vec![5]);

    // It survives a close and reopen.
    drop(store);
    let store = open(tmp.path());
    assert_three(&store, 5);
    assert_eq!(sealed(&store), vec![5]);
}

#[test]
fn only_the_tasks_listed_in_seal_are_loaded_and_the_last_put_wins() {
    let tmp = temp_dir();
    let store = open(tmp.path());
    store.put(1, "op/1/0", b"first").unwrap();
    store.put(1, "op/1/0", b"second").unwrap();
    store.put(1, "op/2/0", b"left out").unwrap();
    assert_eq!(store.seal(1, &["op/1/0"], b"").unwrap(), 6);
    let loaded = store.load(1).unwrap();
    assert_eq!(loaded.tasks.len(), 1);
    assert_eq!(loaded.tasks["op/1/0"], b"second");
}

#[test]
fn missing_checkpoint_refuses_to_start_from_scratch() {
    let tmp = temp_dir();
    let store = open(tmp.path());
    // Put but never sealed is as good as absent.
    store.put(7, "source/0", b"not sealed").unwrap();
    let error = store.load(7).expect_err("checkpoint 7 was never sealed");
    assert!(
        matches!(error, StoreError::Missing { n: 7, .. }),
        "{error:?}"
    );
    let message = error.to_string();
    for part in [
        "checkpoint 7",
        JOB,
        &tmp.path().display().to_string(),
        "refuses to start from scratch silently",
        "Restore the state_dir",
        "reset the job's committed offsets",
    ] {
        assert!(message.contains(part), "`{part}` not in: {message}");
    }
    assert!(sealed(&store).is_empty());
}

#[test]
fn flipped_byte_is_corrupt_naming_the_task() {
    let tmp = temp_dir();
    write_three(&open(tmp.path()), 3);
    tamper(tmp.path(), "op/1/0", |value| {
        let last = value.len() - 1;
        value[last] ^= 0x01;
    });
    let error = open(tmp.path()).load(3).expect_err("the entry was damaged");
    match &error {
        StoreError::Corrupt {
            n: 3,
            task: Some(task),
            ..
        } => assert_eq!(task, "op/1/0"),
        other => panic!("expected Corrupt naming op/1/0, got {other:?}"),
    }
    let message = error.to_string();
    assert!(message.contains("task `op/1/0`"), "{message}");
    assert!(message.contains("checksum mismatch"), "{message}");
    assert!(
        message.contains(&tmp.path().display().to_string()),
        "{message}"
    );
}

#[test]
fn truncated_entry_is_corrupt_naming_the_task() {
    let tmp = temp_dir();
    write_three(&open(tmp.path()), 3);
    tamper(tmp.path(), "source/0", |value| {
        value.truncate(value.len() - 3);
    });
    let error = open(tmp.path())
        .load(3)
        .expect_err("the entry was truncated");
    assert!(
        matches!(&error, StoreError::Corrupt { task: Some(task), .. } if task == "source/0"),
        "{error:?}"
    );
    assert!(error.to_string().contains("bytes but"), "{error}");
}

#[test]
fn manifest_listing_an_absent_entry_is_corrupt() {
    let tmp = temp_dir();
    write_three(&open(tmp.path()), 3);
    delete_raw(tmp.path(), "op/1/1");
    let error = open(tmp.path()).load(3).expect_err("an entry is gone");
    assert!(
        matches!(&error, StoreError::Corrupt { task: Some(task), .. } if task == "op/1/1"),
        "{error:?}"
    );
    assert!(error.to_string().contains("entry is absent"), "{error}");
}

#[test]
fn damaged_manifest_is_corrupt() {
    let tmp = temp_dir();
    write_three(&open(tmp.path()), 3);
    let db = rocksdb::DB::open_default(tmp.path()).unwrap();
    // The manifest is the value that mentions the job in its JSON.
    let key = db
        .iterator(rocksdb::IteratorMode::Start)
        .map(|item| item.unwrap())
        .find(|(_, value)| value.windows(JOB.len()).any(|w| w == JOB.as_bytes()))
        .expect("the manifest exists")
        .0;
    let mut value = db.get(&key).unwrap().unwrap();
    value[20] ^= 0xff;
    db.put(&key, value).unwrap();
    drop(db);
    let error = open(tmp.path())
        .load(3)
        .expect_err("the manifest was damaged");
    assert!(
        matches!(&error, StoreError::Corrupt { task: None, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("its manifest"), "{error}");
}

#[test]
fn seal_of_a_task_never_put_and_put_into_a_sealed_checkpoint_are_refused() {
    let tmp = temp_dir();
    let store = open(tmp.path());
    store.put(1, "op/1/0", b"x").unwrap();
    let error = store
        .seal(1, &["op/1/0", "op/1/1"], b"")
        .expect_err("op/1/1 was never put");
    assert!(
        matches!(&error, StoreError::NotPut { n: 1, task, .. } if task == "op/1/1"),
        "{error:?}"
    );
    assert!(matches!(store.load(1), Err(StoreError::Missing { .. })));

    store.seal(1, &["op/1/0"], b"").unwrap();
    let error = store
        .put(1, "op/1/0", b"y")
        .expect_err("checkpoint 1 is sealed");
    assert!(
        matches!(error, StoreError::AlreadySealed { n: 1, .. }),
        "{error:?}"
    );
    assert_eq!(store.load(1).unwrap().tasks["op/1/0"], b"x");
}

#[test]
fn second_open_in_the_same_process_is_locked() {
    let tmp = temp_dir();
    let _first = open(tmp.path());
    let error = CheckpointStore::open(tmp.path(), JOB).expect_err("the store is already open");
    assert!(matches!(error, StoreError::Locked { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains("is in use by another weir process"),
        "{message}"
    );
    assert!(message.contains("use another state_dir"), "{message}");
    assert!(
        message.contains(&tmp.path().display().to_string()),
        "{message}"
    );
}

#[test]
fn a_table_file_a_crash_left_behind_is_deleted_at_open_but_never_the_holders() {
    let tmp = temp_dir();
    let first = open(tmp.path());
    // What a rebuild writes before RocksDB takes it in (`ingest-<pid>-<n>.sst`).
    let in_flight = tmp.path().join("ingest-4242-0.sst");
    std::fs::write(&in_flight, b"a table file being written").unwrap();
    let error = CheckpointStore::open(tmp.path(), JOB).expect_err("the store is already open");
    assert!(matches!(error, StoreError::Locked { .. }), "{error:?}");
    assert!(in_flight.exists(), "a refused open deleted the holder's table file");
    // The holder dies mid-ingest: the next open finds its file, which nothing refers to.
    drop(first);
    let reopened = open(tmp.path());
    assert!(!in_flight.exists(), "the table file a crash left behind is still there");
    write_three(&reopened, 1);
    assert_three(&reopened, 1);
}

#[test]
fn open_while_another_process_holds_the_store_is_locked() {
    let tmp = temp_dir();
    let mut child = spawn_child(&format!("hold:{}", tmp.path().display()), Stdio::piped());
    let stdout = child.stdout.take().expect("child stdout");
    wait_for_line(stdout, "WEIR-CHILD-OPENED");

    let error = CheckpointStore::open(tmp.path(), JOB).expect_err("the child holds the store");
    assert!(matches!(error, StoreError::Locked { .. }), "{error:?}");
    assert!(
        error.to_string().contains("in use by another weir process"),
        "{error}"
    );

    // Closing the child's stdin lets it exit; then the directory is free again.
    drop(child.stdin.take());
    let status = wait_with_deadline(&mut child);
    assert!(status.success(), "child exited with {status}");
    assert_three(&open(tmp.path()), 1);
}

#[test]
fn sealed_checkpoint_survives_a_crash_right_after_seal() {
    let tmp = temp_dir();
    let mut child = spawn_child(&format!("crash:{}", tmp.path().display()), Stdio::null());
    let status = wait_with_deadline(&mut child);
    assert!(
        !status.success(),
        "the child aborts after sealing, got {status}"
    );
    let store = open(tmp.path());
    assert_eq!(sealed(&store), vec![1]);
    assert_three(&store, 1);
}

/// An at-least-once job's next checkpoint writes the changelog outside a transaction
/// once its fold returns: a fold lost to a SIGKILL would make recovery replay from an
/// older marker, through that checkpoint's uncommitted changes, and count input twice.
#[test]
fn a_synced_fold_survives_a_sigkill() {
    let (_tmp, store) = after_sigkill("fold-and-die");
    let base = store.state_base().unwrap();
    assert_eq!((base.n, base.positions), (7, Some(BTreeMap::from([(0, 12)]))));
    assert_eq!(state_of(&store, 0), [(b"k".to_vec(), b"v".to_vec())]);
}

/// The store a child left in a new directory after it ran `mode` and SIGKILLed itself.
fn after_sigkill(mode: &str) -> (tempfile::TempDir, CheckpointStore) {
    let tmp = temp_dir();
    let mut child = spawn_child(&format!("{mode}:{}", tmp.path().display()), Stdio::null());
    let status = wait_with_deadline(&mut child);
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL), "{status}");
    let store = open(tmp.path());
    (tmp, store)
}

/// A fold of an exactly-once job is not logged, and a SIGKILL loses it until RocksDB
/// flushes it; a marker written after it (a replay's end, a rebalance's, logged and
/// synced) must not survive without it: it would claim state the store lacks, and no
/// replay would bring that back.
#[test]
fn a_marker_written_after_an_unlogged_fold_never_outlives_it() {
    let (_tmp, store) = after_sigkill("fold-mark-die");
    let base = store.state_base().unwrap();
    assert_eq!((base.n, base.positions), (6, Some(BTreeMap::from([(0, 20)]))));
    assert_eq!(state_of(&store, 0), [(b"k".to_vec(), b"v".to_vec())], "the fold before the marker was lost");
}

/// What the crash test above cannot show (an abort keeps the page cache): that `seal` makes
/// the disk hold the manifest before it returns. The child runs under strace, and the
/// manifest's write to the write-ahead log must be followed by an fsync of that file.
#[test]
fn seal_syncs_the_manifest_to_disk_before_it_returns() {
    let tmp = temp_dir();
    let trace = tmp.path().join("strace.out");
    let store_dir = tmp.path().join("store");
    let status = Command::new("strace")
        .args(["-f", "-qq", "-y", "-s", "4096", "-e", "trace=write,writev,pwrite64,pwritev,fsync,fdatasync", "-o"])
        .arg(&trace)
        .arg(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "store::child_process_entry", "--include-ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("crash:{}", store_dir.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("strace must be installed (scripts/setup installs it)");
    assert!(!status.success(), "the child aborts after sealing, got {status}");
    let lines: Vec<String> = std::fs::read_to_string(&trace).expect("the trace").lines().map(str::to_owned).collect();
    let wal = |line: &str| line.contains(".log>");
    let manifest = lines
        .iter()
        .position(|l| wal(l) && l.contains("write") && l.contains("\\\"checkpoint\\\":1"))
        .unwrap_or_else(|| panic!("no write of checkpoint 1's manifest to the WAL in the trace:\n{}", lines.join("\n")));
    let synced = lines[manifest..].iter().any(|l| wal(l) && (l.contains("fsync(") || l.contains("fdatasync(")));
    assert!(synced, "the manifest was written to the WAL but never synced:\n{}", lines[manifest..].join("\n"));
    assert_eq!(sealed(&open(&store_dir)), vec![1]);
}

/// A fresh start discards everything: checkpoint 1 sealed by a run whose Kafka commit never
/// happened must not stop the next run from writing checkpoint 1 again.
#[test]
fn discard_after_zero_clears_a_sealed_first_checkpoint() {
    let tmp = temp_dir();
    let store = open(tmp.path());
    write_three(&store, 1);
    store.put(2, "source/0", b"unsealed").unwrap();
    assert!(matches!(store.put(1, "source/0", b"again"), Err(StoreError::AlreadySealed { n: 1, .. })));
    store.discard_after(0).unwrap();
    assert!(sealed(&store).is_empty());
    write_three(&store, 1);
    assert_three(&store, 1);
}

#[test]
fn prune_before_and_discard_after() {
    let tmp = temp_dir();
    let store = open(tmp.path());
    for n in 1..=6 {
        write_three(&store, n);
    }
    store.put(7, "source/0", b"unsealed").unwrap();
    assert_eq!(sealed(&store), vec![1, 2, 3, 4, 5, 6]);

    store.prune_before(3).unwrap();
    assert_eq!(sealed(&store), vec![3, 4, 5, 6]);
    assert!(matches!(
        store.load(2),
        Err(StoreError::Missing { n: 2, .. })
    ));
    assert_three(&store, 3);

    store.discard_after(4).unwrap();
    assert_eq!(sealed(&store), vec![3, 4]);
    assert!(matches!(
        store.load(5),
        Err(StoreError::Missing { n: 5, .. })
    ));
    // The unsealed leftover of 7 is gone too: sealing it now finds nothing put.
    assert!(matches!(
        store.seal(7, &["source/0"], b""),
        Err(StoreError::NotPut { .. })
    ));
    assert_three(&store, 4);

    // A discarded id can be written again from scratch.
    write_three(&store, 5);
    assert_eq!(sealed(&store), vec![3, 4, 5]);
    assert_three(&store, 5);

    // Both survive a reopen.
    drop(store);
    let store = open(tmp.path());
    assert_eq!(sealed(&store), vec![3, 4, 5]);
    store.discard_after(u64::MAX).unwrap();
    store.prune_before(0).unwrap();
    assert_eq!(sealed(&store), vec![3, 4, 5]);
}

#[test]
fn checkpoints_of_two_jobs_in_one_store_do_not_mix() {
    let tmp = temp_dir();
    // One name a prefix of the other: the key's length byte keeps them apart.
    let a = CheckpointStore::open(tmp.path(), "clicks").unwrap();
    a.put(1, "op/1/0", b"job clicks").unwrap();
    a.seal(1, &["op/1/0"], b"clicks").unwrap();
    a.put(2, "op/1/0", b"job clicks 2").unwrap();
    a.seal(2, &["op/1/0"], b"clicks").unwrap();
    drop(a);

    let b = CheckpointStore::open(tmp.path(), "clicks-2").unwrap();
    assert!(sealed(&b).is_empty());
    assert!(matches!(b.load(1), Err(StoreError::Missing { .. })));
    b.put(1, "op/1/0", b"job clicks-2").unwrap();
    b.seal(1, &["op/1/0"], b"clicks-2").unwrap();
    b.put(5, "op/1/0", b"job clicks-2, 5").unwrap();
    b.seal(5, &["op/1/0"], b"clicks-2").unwrap();
    b.prune_before(5).unwrap();
    b.discard_after(5).unwrap();
    assert_eq!(sealed(&b), vec![5]);
    drop(b);

    let a = CheckpointStore::open(tmp.path(), "clicks").unwrap();
    assert_eq!(sealed(&a), vec![1, 2]);
    assert_eq!(a.load(1).unwrap().tasks["op/1/0"], b"job clicks");
    assert_eq!(a.load(1).unwrap().meta, b"clicks");
    a.discard_after(0).unwrap();
    assert!(sealed(&a).is_empty());
    drop(a);

    let b = CheckpointStore::open(tmp.path(), "clicks-2").unwrap();
    assert_eq!(b.load(5).unwrap().tasks["op/1/0"], b"job clicks-2, 5");
}

#[test]
fn puts_from_many_threads_share_one_store() {
    let tmp = temp_dir();
    let store = Arc::new(open(tmp.path()));
    let names: Vec<String> = (0..8).map(|i| format!("op/1/{i}")).collect();
    let writers: Vec<_> = names
        .iter()
        .cloned()
        .map(|name| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                for n in 1..=3u64 {
                    store
                        .put(n, &name, format!("{name} at {n}").as_bytes())
                        .unwrap();
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().expect("writer thread");
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    for n in 1..=3 {
        store.seal(n, &refs, b"").unwrap();
    }
    let loaded = store.load(2).unwrap();
    assert_eq!(loaded.tasks.len(), 8);
    assert_eq!(loaded.tasks["op/1/5"], b"op/1/5 at 2");
}

#[test]
fn a_directory_that_is_not_a_weir_store_is_refused() {
    let tmp = temp_dir();
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("notes.txt"), "not a store").unwrap();
    let error = CheckpointStore::open(&other, JOB).expect_err("not a store");
    assert!(matches!(error, StoreError::Unreadable { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains("without a RocksDB CURRENT file"),
        "{message}"
    );
    assert!(
        message.contains("point state_dir at a new or empty directory"),
        "{message}"
    );

    // A RocksDB database that weir did not write.
    let foreign = tmp.path().join("foreign");
    let db = rocksdb::DB::open_default(&foreign).unwrap();
    db.put(b"some", b"thing").unwrap();
    drop(db);
    let error = CheckpointStore::open(&foreign, JOB).expect_err("a foreign database");
    assert!(error.to_string().contains("weir did not create"), "{error}");

    // A damaged CURRENT file.
    let damaged = tmp.path().join("damaged");
    drop(open(&damaged));
    let current = std::fs::read_to_string(damaged.join("CURRENT")).unwrap();
    std::fs::write(damaged.join("CURRENT"), "MANIFEST-999999\n").unwrap();
    let error = CheckpointStore::open(&damaged, JOB).expect_err("CURRENT names a missing file");
    assert!(matches!(error, StoreError::Unreadable { .. }), "{error:?}");
    assert!(
        error.to_string().contains("restore it from a backup"),
        "{error}"
    );

    // A garbled MANIFEST.
    std::fs::write(damaged.join("CURRENT"), &current).unwrap();
    std::fs::write(damaged.join(current.trim()), vec![0xa5u8; 4096]).unwrap();
    let error = CheckpointStore::open(&damaged, JOB).expect_err("a garbled MANIFEST");
    assert!(matches!(error, StoreError::Unreadable { .. }), "{error:?}");
}


/// A deletion of a shared state_dir while a process's RocksDB writes into its slot
/// fails and leaves the store's files without CURRENT. A slot holds nothing Kafka does
/// not, so a process clears that and opens its slot anew; a slot with anything else in
/// it, and a job's own state_dir at its start (which may hold state nothing else does),
/// are refused; what a deletion under the running job left of its own is moved aside.
#[test]
fn what_an_interrupted_deletion_leaves_of_a_slot_is_cleared() {
    use weir::checkpoint::state_dir::StateDir;
    let tmp = temp_dir();
    let shared = tmp.path().join("shared");
    let slot = shared.join("process-0");
    let store = open(&slot);
    write_checkpoint(&store, 1, &[("source/0", b"offsets")], b"meta");
    drop(store);
    std::fs::remove_file(slot.join("CURRENT")).unwrap();
    let own = tmp.path().join("own");
    std::fs::create_dir(&own).unwrap();
    for entry in std::fs::read_dir(&slot).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), own.join(entry.file_name())).unwrap();
    }

    let (claimed, store) = StateDir::claim(&shared, JOB, true).expect("the slot's debris is cleared");
    assert_eq!(claimed.store_dir(), slot);
    assert!(sealed(&store).is_empty(), "a cleared slot holds nothing");
    write_checkpoint(&store, 1, &[("source/0", b"offsets")], b"meta");
    drop((claimed, store));

    // Or leave both, the MANIFEST naming files that are gone: RocksDB calls it corrupt,
    // as it does the garbled MANIFEST this stands for.
    let current = std::fs::read_to_string(slot.join("CURRENT")).unwrap();
    std::fs::write(slot.join(current.trim_end()), vec![0xa5u8; 4096]).unwrap();
    let (claimed, store) = StateDir::claim(&shared, JOB, true).expect("a slot RocksDB cannot read is cleared");
    assert!(sealed(&store).is_empty(), "a cleared slot holds nothing");
    write_checkpoint(&store, 1, &[("source/0", b"offsets")], b"meta");
    drop((claimed, store));

    // The deletion may go the other way: the MANIFEST gone, the CURRENT naming it left.
    let current = std::fs::read_to_string(slot.join("CURRENT")).unwrap();
    std::fs::remove_file(slot.join(current.trim_end())).unwrap();
    let (claimed, store) = StateDir::claim(&shared, JOB, true).expect("a slot whose MANIFEST is gone is cleared");
    assert_eq!(claimed.store_dir(), slot);
    assert!(sealed(&store).is_empty(), "a cleared slot holds nothing");
    drop((claimed, store));

    let error = StateDir::claim(&own, JOB, false).map(|_| ()).expect_err("a job's own state_dir is not cleared");
    assert!(error.to_string().contains("without a RocksDB CURRENT file"), "{error}");
    assert!(own.read_dir().unwrap().next().is_some(), "the refused state_dir keeps its files");

    // What a deletion under the running process left of a job's own store is moved
    // aside when the process opens its store anew: it goes on, and nothing is destroyed.
    let running = tmp.path().join("running");
    let (mut claimed, store) = StateDir::claim(&running, JOB, false).expect("a new state_dir");
    write_checkpoint(&store, 1, &[("source/0", b"offsets")], b"meta");
    drop(store);
    std::fs::remove_file(running.join("CURRENT")).unwrap();
    let mut left: Vec<_> = std::fs::read_dir(&running).unwrap().map(|entry| entry.unwrap().file_name()).collect();
    left.sort();
    let store = claimed.reopen().expect("what the deletion left is moved aside");
    assert!(sealed(&store).is_empty(), "a store opened anew holds nothing");
    let aside: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().map(|entry| entry.unwrap().path()).filter(|path| path.to_string_lossy().contains("running.left-")).collect();
    assert_eq!(aside.len(), 1, "one directory set aside: {aside:?}");
    let mut kept: Vec<_> = std::fs::read_dir(&aside[0]).unwrap().map(|entry| entry.unwrap().file_name()).collect();
    kept.sort();
    assert_eq!(kept, left, "the files set aside are the ones the deletion left");

    // Debris whose RocksDB LOCK another live process holds is that process's store:
    // the claim takes the next slot and leaves it alone.
    let busy = tmp.path().join("busy");
    std::fs::create_dir_all(busy.join("process-0")).unwrap();
    for name in ["LOCK", "IDENTITY", "000004.log"] {
        std::fs::write(busy.join("process-0").join(name), b"").unwrap();
    }
    let mut holder = Command::new("python3")
        .args(["-c", "import fcntl,sys,time; f=open(sys.argv[1],'r+'); fcntl.lockf(f, fcntl.LOCK_EX); print('WEIR-CHILD-OPENED', flush=True); time.sleep(120)"])
        .arg(busy.join("process-0").join("LOCK"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 holding a POSIX lock");
    wait_for_line(holder.stdout.take().unwrap(), "WEIR-CHILD-OPENED");
    let claimed = StateDir::claim(&busy, JOB, true).map(|(claimed, _)| claimed.store_dir().to_owned());
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(claimed.expect("the next slot"), busy.join("process-1"));
    assert!(busy.join("process-0").join("000004.log").exists(), "a live process's files are kept");

    let other = tmp.path().join("other");
    std::fs::create_dir_all(other.join("process-0")).unwrap();
    std::fs::write(other.join("process-0").join("notes.txt"), "not a store").unwrap();
    let error = StateDir::claim(&other, JOB, true).map(|_| ()).expect_err("a slot with other files");
    assert!(error.to_string().contains("without a RocksDB CURRENT file"), "{error}");
    assert!(other.join("process-0").join("notes.txt").exists());
}
/// A slot a deletion of the state_dir left half gone (its files without a CURRENT, the
/// lock files gone) while another process's RocksDB still writes into it: a claim that
/// sees files appear while it waits for the deletion to finish leaves the slot and its
/// files to that process and goes on to the next one. It used to stop with "Directory
/// not empty", and once chased a writer through millions of files.
#[test]
fn a_slot_another_process_still_writes_into_is_left_to_it() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use weir::checkpoint::state_dir::StateDir;
    // Far more files than a claim lists before it gives the slot up; a claim that chases
    // the writer's files (or waits the whole deletion wait out) lets it reach the bound.
    const MAX_WRITTEN: u64 = 100_000;
    let tmp = temp_dir();
    let shared = tmp.path().join("shared");
    let slot = shared.join("process-0");
    std::fs::create_dir_all(&slot).unwrap();
    std::fs::write(slot.join("000012.log"), b"x").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, slot) = (Arc::clone(&stop), slot.clone());
        // Log files, as a live RocksDB writes them; once the directory is gone it writes
        // no more (RocksDB does not create its directory again).
        std::thread::spawn(move || {
            let mut written = 0u64;
            while written < MAX_WRITTEN && !stop.load(Ordering::Relaxed) {
                if std::fs::write(slot.join(format!("{:06}.log", 13 + written)), b"x").is_err() {
                    break;
                }
                written += 1;
            }
            written
        })
    };
    let claimed = StateDir::claim(&shared, JOB, true).map(|(claimed, _)| claimed.store_dir().to_owned());
    stop.store(true, Ordering::Relaxed);
    let written = writer.join().expect("writer thread");
    let claimed = claimed.expect("a slot is claimed");
    assert!(written > 0, "the writer wrote nothing");
    assert!(written < MAX_WRITTEN, "the claim let another process write {written} files into a slot before it gave the slot up");
    assert_eq!(claimed, shared.join("process-1"), "the slot another process writes into is left to it");
    assert!(slot.join("000012.log").exists(), "its files are left as they are");
}

/// What a deletion of a scaled-out process's store left, a subdirectory among its files,
/// is deleted whole and the slot claimed.
#[test]
fn a_slot_a_deletion_left_is_cleared_with_its_subdirectories() {
    use weir::checkpoint::state_dir::StateDir;
    let tmp = temp_dir();
    let shared = tmp.path().join("shared");
    let slot = shared.join("process-0");
    std::fs::create_dir_all(slot.join("000013.sst")).unwrap();
    std::fs::write(slot.join("000013.sst").join("inside"), b"x").unwrap();
    std::fs::write(slot.join("000012.log"), b"x").unwrap();
    let (claimed, _store) = StateDir::claim(&shared, JOB, true).expect("the slot is cleared and claimed");
    assert_eq!(claimed.store_dir(), slot);
    assert!(!slot.join("000012.log").exists() && !slot.join("000013.sst").exists());
}

#[test]
fn names_and_sizes_are_bounded() {
    let tmp = temp_dir();
    let error = CheckpointStore::open(tmp.path(), "").expect_err("empty job name");
    assert!(error.to_string().contains("job name ``"), "{error}");
    let store = open(tmp.path());
    assert!(matches!(
        store.put(1, "", b"x"),
        Err(StoreError::InvalidName { .. })
    ));
    let meta = vec![0u8; weir::checkpoint::store::MAX_META_BYTES + 1];
    store.put(1, "op/1/0", b"x").unwrap();
    assert!(matches!(
        store.seal(1, &["op/1/0"], &meta),
        Err(StoreError::TooLarge { .. })
    ));
    let error = store
        .seal(1, &["op/1/0", "op/1/0"], b"")
        .expect_err("listed twice");
    assert!(error.to_string().contains("listed twice"), "{error}");
}

/// Not a test of its own: the body of the child processes that the tests above start.
#[test]
#[ignore = "run in a child process by other tests"]
fn child_process_entry() {
    let Ok(what) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (mode, dir) = what.split_once(':').expect("mode:dir");
    let dir = PathBuf::from(dir);
    match mode {
        "hold" => {
            let store = open(&dir);
            write_three(&store, 1);
            println!("WEIR-CHILD-OPENED");
            std::io::stdout().flush().unwrap();
            // Hold the store until the parent closes our stdin.
            let mut sink = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink).unwrap();
        }
        "fold-and-die" => {
            // An at-least-once fold, then SIGKILL: what survives is what the fold wrote
            // to the disk or the page cache, not what RocksDB held in memory.
            let store = open(&dir);
            let state: [(u32, Change); 1] = [(0, (1, b"k", Some(b"v")))];
            store.fold(7, &state, [], &BTreeMap::from([(0, 12)]), FoldDurability::Synced).unwrap();
            // SAFETY: kill(2) of this process.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
        "fold-mark-die" => {
            // An unlogged fold, a synced marker after it, then SIGKILL.
            let store = open(&dir);
            let state: [(u32, Change); 1] = [(0, (1, b"k", Some(b"v")))];
            store.fold(5, &state, [], &BTreeMap::from([(0, 10)]), FoldDurability::Unlogged).unwrap();
            store.mark_state(6, &BTreeMap::from([(0, 20)])).unwrap();
            // SAFETY: kill(2) of this process.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
        "crash" => {
            let store = open(&dir);
            write_three(&store, 1);
            // Unsealed work after the seal must not hide the sealed checkpoint.
            store.put(2, "source/0", b"in flight").unwrap();
            std::process::abort();
        }
        other => panic!("unknown child mode {other}"),
    }
}

fn spawn_child(what: &str, stdout: Stdio) -> Child {
    Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            "store::child_process_entry",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, what)
        .stdin(Stdio::piped())
        .stdout(stdout)
        .stderr(Stdio::null())
        .spawn()
        .expect("start the child process")
}

/// Reads the child's stdout on a thread until `marker`, failing after `CHILD_DEADLINE`.
fn wait_for_line(stdout: std::process::ChildStdout, marker: &'static str) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.contains(marker) {
                let _ = tx.send(());
                // Keep draining so the child never blocks on a full pipe.
            }
        }
    });
    rx.recv_timeout(CHILD_DEADLINE)
        .unwrap_or_else(|_| panic!("child did not print {marker}"));
}

fn wait_with_deadline(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + CHILD_DEADLINE;
    loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("child process did not exit within {CHILD_DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `stage`'s keyed state in groups 0..8, as (key, value) pairs in store order.
fn state_of(store: &CheckpointStore, stage: u32) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    store
        .read_state(stage, 0..8, 1 << 20, |chunk| {
            out.extend(chunk.iter().map(|(key, value)| {
                (
                    key.to_vec(),
                    value.expect("stored state is a value").to_vec(),
                )
            }));
            Ok::<(), StoreError>(())
        })
        .expect("read the keyed state");
    out
}

#[test]
fn folds_write_committed_changes_with_the_changelog_positions_they_reflect() {
    let dir = temp_dir();
    let store = open(dir.path());
    assert_eq!(
        store.state_base().unwrap(),
        StateBase::default(),
        "an empty store reflects nothing"
    );

    let first: [(u32, Change); 3] = [
        (0, (1, b"a", Some(b"1"))),
        (0, (2, b"b", Some(b"2"))),
        (1, (1, b"a", Some(b"x"))),
    ];
    store
        .fold(1, &first, [], &BTreeMap::from([(1, 10), (2, 4)]), FoldDurability::Unlogged)
        .unwrap();
    let second: [(u32, Change); 2] = [(0, (1, b"a", None)), (0, (3, b"c", Some(b"3")))];
    store
        .fold(2, &second, [], &BTreeMap::from([(1, 12), (2, 4), (3, 1)]), FoldDurability::Unlogged)
        .unwrap();
    drop(store);

    let store = open(dir.path());
    let base = store.state_base().unwrap();
    assert_eq!(
        (base.n, base.positions),
        (2, Some(BTreeMap::from([(1, 12), (2, 4), (3, 1)])))
    );
    assert!(base.written_ms > 0);
    assert_eq!(
        state_of(&store, 0),
        [
            (b"b".to_vec(), b"2".to_vec()),
            (b"c".to_vec(), b"3".to_vec())
        ]
    );
    assert_eq!(state_of(&store, 1), [(b"a".to_vec(), b"x".to_vec())]);

    store.clear().unwrap();
    assert_eq!(store.state_base().unwrap(), StateBase::default());
    assert!(state_of(&store, 0).is_empty() && state_of(&store, 1).is_empty());
}

#[test]
fn a_finished_replay_replaces_an_uncommitted_checkpoint_of_its_number() {
    let dir = temp_dir();
    let store = open(dir.path());
    // Another instance's checkpoint 3, sealed here but never committed.
    write_checkpoint(&store, 3, &[("op/0/0", b"theirs")], b"meta");
    store
        .put_state([(0, 1, &b"k"[..], Some(&b"v"[..]))])
        .unwrap();
    let committed = Checkpoint {
        n: 3,
        meta: b"meta".to_vec(),
        tasks: BTreeMap::from([("op/0/0".to_string(), b"ours".to_vec())]),
    };
    store
        .finish_replay(&committed, &BTreeMap::from([(0, 7)]))
        .unwrap();
    assert_eq!(store.load(3).unwrap().tasks["op/0/0"], b"ours");
    assert_eq!(store.state_base().unwrap().n, 3);
    assert_eq!(state_of(&store, 0), [(b"k".to_vec(), b"v".to_vec())]);
}

#[test]
fn a_reseed_stays_marked_until_it_ends_and_keeps_the_state() {
    let dir = temp_dir();
    let store = open(dir.path());
    let state: [(u32, Change); 1] = [(0, (1, b"k", Some(b"v")))];
    store.fold(4, &state, [], &BTreeMap::from([(1, 30)]), FoldDurability::Unlogged).unwrap();
    assert!(!store.reseeding().unwrap());

    // The changelog was recreated: it ends at 0 everywhere now.
    store.begin_reseed(4, &BTreeMap::from([(0, 0), (1, 0)])).unwrap();
    drop(store);
    let store = open(dir.path());
    assert!(store.reseeding().unwrap(), "the mark survives a crash");
    let base = store.state_base().unwrap();
    assert_eq!((base.n, base.positions), (4, Some(BTreeMap::from([(0, 0), (1, 0)]))));
    assert_eq!(state_of(&store, 0), [(b"k".to_vec(), b"v".to_vec())], "the state itself is kept");

    // Only the reseed's last commit ends it (a fold of an at-least-once run in between
    // must not), or a fresh start.
    store.fold(5, &[], [], &BTreeMap::from([(0, 3), (1, 1)]), FoldDurability::Synced).unwrap();
    assert!(store.reseeding().unwrap());
    store.end_reseed().unwrap();
    assert!(!store.reseeding().unwrap());
    store.begin_reseed(5, &BTreeMap::new()).unwrap();
    store.clear().unwrap();
    assert!(!store.reseeding().unwrap());
}
