//! The checkpoint store: an embedded RocksDB directory (the job's `state_dir`) holding each
//! task's snapshot for checkpoint N. `seal` writes N's manifest with a synced write, which makes
//! N durable before the coordinator commits its Kafka transaction; recovery `load`s the
//! checkpoint that Kafka's committed offsets name, and nothing else.
//!
//! Layout. One key space per job, so two jobs may share a directory without mixing:
//!
//! ```text
//! 0x00 "weir-checkpoint-store"                      -> format marker (FORMAT)
//! 0x01 len(job):u8 job  n:u64be  0x00               -> manifest of checkpoint n (framed JSON)
//! 0x01 len(job):u8 job  n:u64be  0x01  task         -> snapshot bytes of `task` (framed)
//! 0x02..0x06 ...                                    -> keyed state (`state/cache.rs`)
//! ```
//!
//! The checkpoint id is big-endian so that keys sort by checkpoint and a range delete removes
//! whole checkpoints; the manifest sorts before its entries, so `load` reads it with one seek
//! per checkpoint. A framed value is `crc32c:u32le len:u64le payload`, the checksum covering the
//! key, the length and the payload, so a truncated value, a flipped bit or a value stored under
//! the wrong key all fail verification.
//!
//! The keyed spaces are `state/cache.rs`'s, an `impl CheckpointStore` of its own: this file
//! lends it the RocksDB handle, the framing, the key spaces and the two writes (synced, and
//! unlogged) as `pub(crate)`, and reads nothing of what it keeps there.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use rocksdb::{DB, DBCompressionType, ErrorKind, Options, WriteBatch, WriteOptions};
use serde::{Deserialize, Serialize};

/// Largest snapshot of one task. Bigger state belongs in keyed state, not in one blob that is
/// rewritten at every checkpoint.
pub const MAX_SNAPSHOT_BYTES: usize = 1 << 30;
/// Largest caller-supplied metadata of a checkpoint (parallelism, job id, watermarks...).
pub const MAX_META_BYTES: usize = 64 * 1024;
/// Largest number of tasks in one checkpoint, and of unsealed snapshots held for `seal`.
pub const MAX_TASKS: usize = 16 * 1024;
/// Longest job name, in bytes (its length is one key byte).
pub const MAX_JOB_NAME_BYTES: usize = u8::MAX as usize;
/// Longest task name, in bytes.
pub const MAX_TASK_NAME_BYTES: usize = 1024;

/// The value of the format marker key; a store written by a future, incompatible layout has
/// another value and is refused rather than misread.
const FORMAT: &[u8] = b"weir checkpoint store, format 1";
const FORMAT_KEY: &[u8] = b"\x00weir-checkpoint-store";
const CHECKPOINTS: u8 = 0x01;
const KIND_MANIFEST: u8 = 0x00;
const KIND_ENTRY: u8 = 0x01;
/// Per-checkpoint changes, as weir wrote them up to commit 36c9be7: deleted on recovery.
const LEGACY_DELTA: u8 = 0x03;
/// Bytes of `stage` and `group` at the head of a keyed-state key (`state/cache.rs`).
const STATE_HEAD: usize = 4 + 4;
const FRAME_HEADER: usize = 4 + 8;
const MANIFEST_FORMAT: u32 = 1;

/// Everything that can go wrong with the checkpoint store. Each message names the directory
/// (and the checkpoint and task where there is one) and says what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    #[error(
        "checkpoint store {dir} is in use by another weir process (RocksDB holds {dir}/LOCK); \
         stop it or use another state_dir ({detail})",
        dir = .dir.display()
    )]
    Locked { dir: PathBuf, detail: String },

    #[error(
        "{dir} cannot be opened as a weir checkpoint store: {detail}. If it is this job's \
         state_dir, delete it (an exactly-once job rebuilds it from its changelog topic) or, \
         for an at-least-once job, restore it from a backup; otherwise point state_dir at a \
         new or empty directory",
        dir = .dir.display()
    )]
    Unreadable { dir: PathBuf, detail: String },

    #[error(
        "checkpoint {n} of job `{job}` is not in the checkpoint store {dir}, and weir refuses \
         to start from scratch silently. Restore the state_dir that holds checkpoint {n}, or, to \
         start over deliberately with empty state, reset the job's committed offsets (delete \
         consumer group `{job}`)",
        dir = .dir.display()
    )]
    Missing { dir: PathBuf, job: String, n: u64 },

    #[error(
        "checkpoint {n} of job `{job}` in {dir} is corrupt: {what}: {detail}. Delete the \
         state_dir: an exactly-once job then rebuilds it from its changelog topic (an \
         at-least-once job cannot: restore the state_dir from a backup instead)",
        dir = .dir.display(),
        what = describe_task(.task.as_deref())
    )]
    Corrupt {
        dir: PathBuf,
        job: String,
        n: u64,
        task: Option<String>,
        detail: String,
    },

    #[error(
        "checkpoint {n} of job `{job}` in {dir} was written by a newer weir (manifest format \
         {format}; this one reads {MANIFEST_FORMAT}): run the job with that weir or a newer one, \
         which reads what it wrote",
        dir = .dir.display()
    )]
    NewerFormat { dir: PathBuf, job: String, n: u64, format: u32 },

    #[error(
        "checkpoint {n} cannot be sealed in {dir}: no snapshot of task `{task}` was put for it; \
         every task listed in `seal` must `put` its snapshot first",
        dir = .dir.display()
    )]
    NotPut { dir: PathBuf, n: u64, task: String },

    #[error(
        "snapshot of task `{task}` cannot be put into checkpoint {n} in {dir}: the checkpoint \
         is already sealed, and a sealed checkpoint never changes",
        dir = .dir.display()
    )]
    AlreadySealed { dir: PathBuf, n: u64, task: String },

    #[error("{what} is {size} bytes, over the limit of {limit} bytes in checkpoint store {dir}", dir = .dir.display())]
    TooLarge {
        dir: PathBuf,
        what: String,
        size: usize,
        limit: usize,
    },

    #[error("{what} `{name}` cannot be used in checkpoint store {dir}: {reason}", dir = .dir.display())]
    InvalidName {
        dir: PathBuf,
        what: &'static str,
        name: String,
        reason: String,
    },

    #[error(
        "cannot create checkpoint store directory {dir}: {source}; create it or make its parent \
         writable by weir",
        dir = .dir.display()
    )]
    CreateDir {
        dir: PathBuf,
        source: std::io::Error,
    },

    #[error(
        "cannot delete {dir}, which holds what a deletion of a scaled-out process's checkpoint store \
         left: {source}; delete it by hand, or make it writable by weir",
        dir = .dir.display()
    )]
    ClearSlot {
        dir: PathBuf,
        source: std::io::Error,
    },

    #[error(
        "{max} processes of job `{job}` already run with state_dir {dir}; give this one another state_dir",
        dir = .dir.display(), job = .job
    )]
    Crowded { dir: PathBuf, job: String, max: u32 },

    #[error(
        "checkpoint store {dir} was deleted while the job ran; weir opens it anew, empty, and rebuilds \
         the state from the job's changelog topic",
        dir = .dir.display()
    )]
    Vanished { dir: PathBuf },

    #[error(
        "{action} in checkpoint store {dir} failed: {source}; check that the disk is not full \
         and that {dir} is writable",
        dir = .dir.display()
    )]
    Rocks {
        dir: PathBuf,
        action: String,
        source: rocksdb::Error,
    },

    #[error(
        "{action} in checkpoint store {dir} found the store damaged: {detail}. A restart would \
         meet the same damage: delete the state_dir (an exactly-once job rebuilds it from its \
         changelog topic; an at-least-once job cannot: restore the state_dir from a backup)",
        dir = .dir.display()
    )]
    Damaged { dir: PathBuf, action: String, detail: String },
}

fn describe_task(task: Option<&str>) -> String {
    match task {
        Some(task) => format!("task `{task}`"),
        None => "its manifest".to_owned(),
    }
}

/// A sealed checkpoint as loaded: the metadata given to `seal` and every task's snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub n: u64,
    pub meta: Vec<u8>,
    pub tasks: BTreeMap<String, Vec<u8>>,
}

/// What a manifest records of each task, so `load` can tell a stale or swapped entry from the
/// one that was sealed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct EntryInfo {
    size: u64,
    crc: u32,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    format: u32,
    job: String,
    checkpoint: u64,
    meta: Vec<u8>,
    tasks: BTreeMap<String, EntryInfo>,
}

/// The checkpoint store of one job. `Send + Sync`: share it through an `Arc` between the
/// threads that `put` snapshots and the committer that `seal`s and prunes.
pub struct CheckpointStore {
    pub(crate) db: DB,
    dir: PathBuf,
    /// The directory's device and inode at open: a directory of that name made anew
    /// (deleted and created again, by someone or by another process) is not this store's.
    identity: Option<(u64, u64)>,
    job: String,
    /// `[CHECKPOINTS, len(job), job..]`: the start of every key of this job.
    pub(crate) prefix: Vec<u8>,
    /// Snapshots put but not yet sealed, by checkpoint, so `seal` can write the manifest without
    /// reading the state back. Emptied by `seal`, `prune_before` and `discard_after`; never holds
    /// more than `MAX_TASKS` entries.
    unsealed: Mutex<BTreeMap<u64, HashMap<String, EntryInfo>>>,
    /// Set by a fold written without RocksDB's log: until the memtable is flushed, a
    /// crash loses it, while a logged write after it survives. A synced write flushes
    /// first, or a state marker it writes could outlive the state it stands for.
    unlogged: AtomicBool,
}

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CheckpointStore>();
};

/// A directory's device and inode; `None` if it cannot be read.
fn identity(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir).ok().map(|metadata| (metadata.dev(), metadata.ino()))
}

impl std::fmt::Debug for CheckpointStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointStore")
            .field("dir", &self.dir)
            .field("job", &self.job)
            .finish()
    }
}

impl CheckpointStore {
    /// Opens the store in `dir` for job `job`, creating the directory (and its parents) and
    /// the store if missing. A directory held by another live process is `Locked`; a directory
    /// that holds something other than a weir store, or a damaged one, is `Unreadable`.
    pub fn open(dir: &Path, job: &str) -> Result<Self, StoreError> {
        validate_name(dir, "job name", job, MAX_JOB_NAME_BYTES)?;
        if dir.exists() {
            if !dir.is_dir() {
                return Err(StoreError::Unreadable {
                    dir: dir.to_owned(),
                    detail: "it is not a directory".to_owned(),
                });
            }
            let not_empty = std::fs::read_dir(dir)
                .map_err(|source| StoreError::CreateDir {
                    dir: dir.to_owned(),
                    source,
                })?
                .next()
                .is_some();
            // RocksDB would happily create a database among someone else's files.
            if not_empty && !dir.join("CURRENT").is_file() {
                return Err(StoreError::Unreadable {
                    dir: dir.to_owned(),
                    detail: "it is a non-empty directory without a RocksDB CURRENT file".to_owned(),
                });
            }
        } else {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
                dir: dir.to_owned(),
                source,
            })?;
        }

        let identity = identity(dir);
        let db = DB::open(&rocks_options(), dir).map_err(|e| open_error(dir, e))?;
        // Only now that this process holds the directory's lock: before it, the table
        // file being ingested could be the live holder's.
        remove_ingest_debris(dir);
        let mut prefix = Vec::with_capacity(2 + job.len());
        prefix.push(CHECKPOINTS);
        prefix.push(u8::try_from(job.len()).expect("job name length checked above"));
        prefix.extend_from_slice(job.as_bytes());
        let store = CheckpointStore {
            db,
            dir: dir.to_owned(),
            identity,
            job: job.to_owned(),
            prefix,
            unsealed: Mutex::new(BTreeMap::new()),
            unlogged: AtomicBool::new(false),
        };
        store.check_format()?;
        Ok(store)
    }

    /// Whether the store's directory is gone (deleted under the running process):
    /// RocksDB goes on writing into files that no longer have a name until it needs a
    /// new one, then fails; a new store in a new directory is what can go on.
    /// A directory it cannot look into (no permission, a stale mount) is not taken for
    /// gone: RocksDB's own error says what it is.
    pub fn check_present(&self) -> Result<(), StoreError> {
        let not_found = |path: &Path| matches!(std::fs::metadata(path), Err(e) if e.kind() == std::io::ErrorKind::NotFound);
        let replaced = identity(&self.dir).is_some_and(|now| Some(now) != self.identity);
        match not_found(&self.dir) || not_found(&self.dir.join("CURRENT")) || replaced {
            true => Err(StoreError::Vanished { dir: self.dir.clone() }),
            false => Ok(()),
        }
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The job whose checkpoints this handle reads and writes.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// Writes one task's snapshot for checkpoint `n` (task names like `source/0`, `op/1/0`).
    /// Not durable until `seal(n, ..)`; putting the same task twice keeps the last snapshot.
    pub fn put(&self, n: u64, task: &str, bytes: &[u8]) -> Result<(), StoreError> {
        validate_name(&self.dir, "task name", task, MAX_TASK_NAME_BYTES)?;
        if bytes.len() > MAX_SNAPSHOT_BYTES {
            return Err(StoreError::TooLarge {
                dir: self.dir.clone(),
                what: format!("the snapshot of task `{task}` for checkpoint {n}"),
                size: bytes.len(),
                limit: MAX_SNAPSHOT_BYTES,
            });
        }
        let sealed = self
            .db
            .get_pinned(self.manifest_key(n))
            .map_err(|source| {
                self.rocks(format!("reading the manifest of checkpoint {n}"), source)
            })?
            .is_some();
        if sealed {
            return Err(StoreError::AlreadySealed {
                dir: self.dir.clone(),
                n,
                task: task.to_owned(),
            });
        }

        let key = self.entry_key(n, task);
        let (value, info) = frame(&key, bytes);
        {
            let unsealed = self.lock_unsealed();
            let held: usize = unsealed.values().map(HashMap::len).sum();
            let known = unsealed
                .get(&n)
                .is_some_and(|tasks| tasks.contains_key(task));
            if !known && held >= MAX_TASKS {
                return Err(StoreError::TooLarge {
                    dir: self.dir.clone(),
                    what: format!(
                        "the number of unsealed snapshots (checkpoints written but never sealed, \
                         pruned or discarded) when putting task `{task}` of checkpoint {n}"
                    ),
                    size: held + 1,
                    limit: MAX_TASKS,
                });
            }
        }
        // Not synced: `seal`'s synced write makes every earlier write of the WAL durable too.
        // Outside the lock, so that tasks write their snapshots in parallel.
        self.db
            .put_opt(&key, &value, &WriteOptions::default())
            .map_err(|source| {
                self.rocks(format!("writing task `{task}` of checkpoint {n}"), source)
            })?;
        self.lock_unsealed()
            .entry(n)
            .or_default()
            .insert(task.to_owned(), info);
        Ok(())
    }

    /// Makes checkpoint `n` durable: writes its manifest (each task with its size and
    /// checksum, plus `meta`) with a synced write, after which `load(n)` finds every task, even
    /// after a crash. Returns the total size of the tasks' snapshots in bytes.
    pub fn seal(&self, n: u64, tasks: &[&str], meta: &[u8]) -> Result<u64, StoreError> {
        if meta.len() > MAX_META_BYTES {
            return Err(StoreError::TooLarge {
                dir: self.dir.clone(),
                what: format!("the metadata of checkpoint {n}"),
                size: meta.len(),
                limit: MAX_META_BYTES,
            });
        }
        if tasks.len() > MAX_TASKS {
            return Err(StoreError::TooLarge {
                dir: self.dir.clone(),
                what: format!("the task count of checkpoint {n}"),
                size: tasks.len(),
                limit: MAX_TASKS,
            });
        }
        let mut listed = BTreeMap::new();
        // The lock is not held across the synced write below: puts of the next checkpoint go on
        // while this one's fsync runs.
        let unsealed = self.lock_unsealed();
        let put = unsealed.get(&n);
        for &task in tasks {
            let info = put
                .and_then(|put| put.get(task))
                .ok_or_else(|| StoreError::NotPut {
                    dir: self.dir.clone(),
                    n,
                    task: task.to_owned(),
                })?;
            if listed.insert(task.to_owned(), *info).is_some() {
                return Err(StoreError::InvalidName {
                    dir: self.dir.clone(),
                    what: "task name",
                    name: task.to_owned(),
                    reason: format!("it is listed twice in the seal of checkpoint {n}"),
                });
            }
        }
        drop(unsealed);
        let total = listed.values().map(|info| info.size).sum();
        let manifest = Manifest {
            format: MANIFEST_FORMAT,
            job: self.job.clone(),
            checkpoint: n,
            meta: meta.to_vec(),
            tasks: listed,
        };
        let json = serde_json::to_vec(&manifest).expect("a manifest always serializes");
        let key = self.manifest_key(n);
        let (value, _) = frame(&key, &json);
        let mut sync = WriteOptions::default();
        sync.set_sync(true);
        self.db
            .put_opt(&key, &value, &sync)
            .map_err(|source| self.rocks(format!("sealing checkpoint {n}"), source))?;
        self.lock_unsealed().remove(&n);
        Ok(total)
    }

    /// Loads sealed checkpoint `n`, every snapshot verified against its checksum and against the
    /// size and checksum its manifest recorded. `Missing` if `n` was never sealed (or was pruned);
    /// `Corrupt`, naming the task, if anything fails verification or an entry is absent.
    pub fn load(&self, n: u64) -> Result<Checkpoint, StoreError> {
        // One snapshot, so a concurrent prune or discard cannot tear the read.
        let snapshot = self.db.snapshot();
        let corrupt = |task: Option<&str>, detail: String| StoreError::Corrupt {
            dir: self.dir.clone(),
            job: self.job.clone(),
            n,
            task: task.map(str::to_owned),
            detail,
        };

        let key = self.manifest_key(n);
        let value = snapshot
            .get_pinned(&key)
            .map_err(|source| {
                self.rocks(format!("reading the manifest of checkpoint {n}"), source)
            })?
            .ok_or_else(|| StoreError::Missing {
                dir: self.dir.clone(),
                job: self.job.clone(),
                n,
            })?;
        let json = unframe(&key, &value).map_err(|detail| corrupt(None, detail))?;
        let manifest: Manifest = serde_json::from_slice(json)
            .map_err(|e| corrupt(None, format!("it is not a valid manifest ({e})")))?;
        if manifest.format > MANIFEST_FORMAT {
            return Err(StoreError::NewerFormat { dir: self.dir.clone(), job: self.job.clone(), n, format: manifest.format });
        }
        if manifest.format != MANIFEST_FORMAT {
            return Err(corrupt(
                None,
                format!(
                    "manifest format {} is not {MANIFEST_FORMAT}, the one this weir reads",
                    manifest.format
                ),
            ));
        }
        if manifest.job != self.job || manifest.checkpoint != n {
            return Err(corrupt(
                None,
                format!(
                    "the manifest is that of checkpoint {} of job `{}`",
                    manifest.checkpoint, manifest.job
                ),
            ));
        }

        let mut tasks = BTreeMap::new();
        for (task, expected) in &manifest.tasks {
            let key = self.entry_key(n, task);
            let value = snapshot
                .get_pinned(&key)
                .map_err(|source| {
                    self.rocks(format!("reading task `{task}` of checkpoint {n}"), source)
                })?
                .ok_or_else(|| {
                    corrupt(
                        Some(task),
                        "the manifest lists it but its entry is absent".to_owned(),
                    )
                })?;
            let bytes = unframe(&key, &value).map_err(|detail| corrupt(Some(task), detail))?;
            let found = EntryInfo {
                size: bytes.len() as u64,
                crc: crc32c::crc32c(bytes),
            };
            if found != *expected {
                return Err(corrupt(
                    Some(task),
                    format!(
                        "the entry ({} bytes, crc32c {:08x}) is not the one sealed ({} bytes, \
                         crc32c {:08x})",
                        found.size, found.crc, expected.size, expected.crc
                    ),
                ));
            }
            tasks.insert(task.clone(), bytes.to_vec());
        }
        Ok(Checkpoint {
            n,
            meta: manifest.meta,
            tasks,
        })
    }

    /// Deletes every checkpoint of this job older than `n`, sealed or not. Called once `n`'s
    /// Kafka transaction has committed; `n` itself stays, as the one recovery will load.
    pub fn prune_before(&self, n: u64) -> Result<(), StoreError> {
        let mut batch = WriteBatch::default();
        batch.delete_range(self.checkpoint_start(0), self.checkpoint_start(n));
        // Not synced: if a crash loses the delete, the old checkpoints are merely kept longer and
        // the next prune removes them.
        self.db
            .write_opt(batch, &WriteOptions::default())
            .map_err(|source| self.rocks(format!("pruning checkpoints before {n}"), source))?;
        let mut unsealed = self.lock_unsealed();
        *unsealed = unsealed.split_off(&n);
        Ok(())
    }

    /// Deletes every checkpoint of this job newer than `n`, sealed or not. Recovery calls it with
    /// the checkpoint Kafka committed: later ones were sealed but their transactions never
    /// committed, so they must never be loaded.
    pub fn discard_after(&self, n: u64) -> Result<(), StoreError> {
        let Some(next) = n.checked_add(1) else {
            return Ok(());
        };
        let mut batch = WriteBatch::default();
        batch.delete_range(self.checkpoint_start(next), self.job_end());
        self.discard_legacy_deltas(&mut batch);
        // Synced: a discarded checkpoint must not reappear after a crash and be taken for a
        // newer one when checkpoint ids are reused.
        self.write_synced(batch, || format!("discarding checkpoints after {n}"))?;
        self.lock_unsealed().split_off(&next);
        Ok(())
    }

    /// Accepts a store that carries our marker, adopts an empty one, refuses anything else.
    fn check_format(&self) -> Result<(), StoreError> {
        let unreadable = |detail: String| StoreError::Unreadable {
            dir: self.dir.clone(),
            detail,
        };
        let marker = self
            .db
            .get(FORMAT_KEY)
            .map_err(|source| self.rocks("reading the format marker".to_owned(), source))?;
        match marker {
            Some(marker) if marker == FORMAT => Ok(()),
            Some(marker) => Err(unreadable(format!(
                "it was written in another format ({:?}); this weir reads {:?}",
                String::from_utf8_lossy(&marker),
                String::from_utf8_lossy(FORMAT)
            ))),
            None => {
                let mut iter = self.db.raw_iterator();
                iter.seek_to_first();
                let empty = iter.key().is_none();
                iter.status()
                    .map_err(|source| self.rocks("reading the first key".to_owned(), source))?;
                if !empty {
                    return Err(unreadable(
                        "it is a RocksDB database that weir did not create".to_owned(),
                    ));
                }
                let mut sync = WriteOptions::default();
                sync.set_sync(true);
                self.db
                    .put_opt(FORMAT_KEY, FORMAT, &sync)
                    .map_err(|source| self.rocks("writing the format marker".to_owned(), source))
            }
        }
    }

    fn lock_unsealed(
        &self,
    ) -> std::sync::MutexGuard<'_, BTreeMap<u64, HashMap<String, EntryInfo>>> {
        // A panic while holding the lock leaves the map as consistent as RocksDB itself: at worst
        // a put is recorded that `seal` will reference, and its entry is then in RocksDB too.
        self.unsealed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn checkpoint_start(&self, n: u64) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.prefix.len() + 8);
        key.extend_from_slice(&self.prefix);
        key.extend_from_slice(&n.to_be_bytes());
        key
    }

    fn manifest_key(&self, n: u64) -> Vec<u8> {
        let mut key = self.checkpoint_start(n);
        key.push(KIND_MANIFEST);
        key
    }

    fn entry_key(&self, n: u64, task: &str) -> Vec<u8> {
        let mut key = self.checkpoint_start(n);
        key.push(KIND_ENTRY);
        key.extend_from_slice(task.as_bytes());
        key
    }

    /// Above every key of this job: after the 8 id bytes come only the kinds 0x00 and 0x01.
    fn job_end(&self) -> Vec<u8> {
        let mut key = self.prefix.clone();
        key.extend_from_slice(&[0xff; 9]);
        key
    }

    /// Writes `batch` with RocksDB's write-ahead log, not synced: a synced write after
    /// it takes it to the disk too.
    pub(crate) fn write_logged(&self, batch: WriteBatch, action: impl FnOnce() -> String) -> Result<(), StoreError> {
        self.db.write(batch).map_err(|source| self.rocks(action(), source))
    }

    /// Writes `batch` and waits until it is on disk: for what a crash must not undo.
    /// Unlogged folds before it are flushed first: a crash keeps both or loses what
    /// follows them, never the folds alone.
    pub(crate) fn write_synced(&self, batch: WriteBatch, action: impl FnOnce() -> String) -> Result<(), StoreError> {
        if self.unlogged.swap(false, Ordering::AcqRel)
            && let Err(source) = self.db.flush()
        {
            self.unlogged.store(true, Ordering::Release);
            return Err(self.rocks("flushing the state folded without the write-ahead log".into(), source));
        }
        let mut sync = WriteOptions::default();
        sync.set_sync(true);
        self.db.write_opt(batch, &sync).map_err(|source| self.rocks(action(), source))
    }

    /// Writes `batch` without RocksDB's write-ahead log: a crash may lose it, whole or in
    /// part, and the next synced write flushes it first (`write_synced`), so that no
    /// marker written after it outlives it.
    pub(crate) fn write_unlogged(&self, batch: WriteBatch, action: impl FnOnce() -> String) -> Result<(), StoreError> {
        // Set before and after: a synced write meanwhile flushes, or sees it after.
        self.unlogged.store(true, Ordering::Release);
        let mut unlogged = WriteOptions::default();
        unlogged.disable_wal(true);
        self.db.write_opt(batch, &unlogged).map_err(|source| self.rocks(action(), source))?;
        self.unlogged.store(true, Ordering::Release);
        Ok(())
    }

    /// Deletes the per-checkpoint changes an older weir kept (part of `discard_after`).
    fn discard_legacy_deltas(&self, batch: &mut WriteBatch) {
        batch.delete_range(self.space_key(LEGACY_DELTA), self.space_end(LEGACY_DELTA));
    }

    /// `[space, len(job), job..]`: the start of a key space of this job.
    pub(crate) fn space_key(&self, space: u8) -> Vec<u8> {
        let mut key = self.prefix.clone();
        key[0] = space;
        key
    }

    /// Above every key of a space of this job.
    pub(crate) fn space_end(&self, space: u8) -> Vec<u8> {
        let mut key = self.space_key(space);
        key.extend_from_slice(&[0xff; STATE_HEAD + 1]);
        key
    }

    /// A RocksDB failure while `action`: damage RocksDB found (a checksum that does not
    /// match) is the store's, the rest may pass.
    pub(crate) fn rocks(&self, action: String, source: rocksdb::Error) -> StoreError {
        let dir = self.dir.clone();
        match source.kind() {
            ErrorKind::Corruption => StoreError::Damaged { dir, action, detail: source.into_string() },
            _ => StoreError::Rocks { dir, action, source },
        }
    }
}

/// The store's RocksDB options, for opening it and for the table files it takes in.
pub(crate) fn rocks_options() -> Options {
    let mut options = Options::default();
    options.create_if_missing(true);
    options.set_paranoid_checks(true);
    // Built without compression libraries; say so rather than depend on RocksDB's default.
    options.set_compression_type(DBCompressionType::None);
    // RocksDB's own info logs and MANIFEST grow without limit by default.
    options.set_keep_log_file_num(4);
    options.set_max_log_file_size(16 << 20);
    options.set_max_manifest_file_size(64 << 20);
    // Keyed state changes all over its key range, so each compaction out of level 0
    // rewrites most of the bottom level. A memtable twice the default (64 MB) and eight
    // level-0 files before a compaction (four) halved the compactions' CPU at 10 M keys
    // (`bench/state`; docs/benchmarks.md).
    options.set_write_buffer_size(128 << 20);
    options.set_level_zero_file_num_compaction_trigger(8);
    options
}

/// The names of table files written for the store to take in (`ingest_state`), in its
/// directory; one a crash left behind is deleted when the store opens.
pub(crate) const INGEST_PREFIX: &str = "ingest-";

/// Table files a process wrote for the store to take in and died before it did: nothing
/// refers to them.
fn remove_ingest_debris(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        if entry.file_name().to_str().is_some_and(|name| name.starts_with(INGEST_PREFIX)) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

fn validate_name(dir: &Path, what: &'static str, name: &str, max: usize) -> Result<(), StoreError> {
    let reason = if name.is_empty() {
        "it is empty".to_owned()
    } else if name.len() > max {
        format!("it is {} bytes long, over the limit of {max}", name.len())
    } else {
        return Ok(());
    };
    Err(StoreError::InvalidName {
        dir: dir.to_owned(),
        what,
        name: name.to_owned(),
        reason,
    })
}

fn open_error(dir: &Path, error: rocksdb::Error) -> StoreError {
    let message = error.to_string();
    // RocksDB reports a lock held by another process ("While lock file: <dir>/LOCK: Resource
    // temporarily unavailable") and by this one ("lock hold by current process ... <dir>/LOCK")
    // as IO errors naming the LOCK file.
    let lock_file = dir.join("LOCK");
    if error.kind() == ErrorKind::IOError
        && message.to_lowercase().contains("lock")
        && message.contains(&*lock_file.to_string_lossy())
    {
        return StoreError::Locked {
            dir: dir.to_owned(),
            detail: message,
        };
    }
    // A file the store's CURRENT or MANIFEST names being absent is damage too, not a passing
    // I/O failure.
    let missing_file =
        error.kind() == ErrorKind::IOError && message.contains("No such file or directory");
    match error.kind() {
        ErrorKind::Corruption | ErrorKind::InvalidArgument | ErrorKind::NotSupported => {
            StoreError::Unreadable {
                dir: dir.to_owned(),
                detail: message,
            }
        }
        _ if missing_file => StoreError::Unreadable {
            dir: dir.to_owned(),
            detail: message,
        },
        _ => StoreError::Rocks {
            dir: dir.to_owned(),
            action: "opening".to_owned(),
            source: error,
        },
    }
}

/// `crc32c(key ‖ len ‖ payload):u32le ‖ len:u64le ‖ payload`, and what a manifest records of it.
fn frame(key: &[u8], payload: &[u8]) -> (Vec<u8>, EntryInfo) {
    let mut value = Vec::with_capacity(FRAME_HEADER + payload.len());
    frame_into(key, payload, &mut value);
    let info = EntryInfo { size: payload.len() as u64, crc: crc32c::crc32c(payload) };
    (value, info)
}

/// Replaces `out` with the framed `payload` (see `frame`).
pub(crate) fn frame_into(key: &[u8], payload: &[u8], out: &mut Vec<u8>) {
    let len = (payload.len() as u64).to_le_bytes();
    let crc = crc32c::crc32c_append(crc32c::crc32c_append(crc32c::crc32c(key), &len), payload);
    out.clear();
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&len);
    out.extend_from_slice(payload);
}

/// The payload of a framed value, or what is wrong with it.
pub(crate) fn unframe<'v>(key: &[u8], value: &'v [u8]) -> Result<&'v [u8], String> {
    if value.len() < FRAME_HEADER {
        return Err(format!(
            "the value is {} bytes, shorter than its {FRAME_HEADER}-byte header",
            value.len()
        ));
    }
    let (header, payload) = value.split_at(FRAME_HEADER);
    let stored_crc = u32::from_le_bytes(header[..4].try_into().expect("4 bytes"));
    let len_bytes = &header[4..];
    let len = u64::from_le_bytes(len_bytes.try_into().expect("8 bytes"));
    if len != payload.len() as u64 {
        return Err(format!(
            "the header says {len} bytes but {} follow it",
            payload.len()
        ));
    }
    let crc = crc32c::crc32c_append(
        crc32c::crc32c_append(crc32c::crc32c(key), len_bytes),
        payload,
    );
    if crc != stored_crc {
        return Err(format!(
            "checksum mismatch (stored crc32c {stored_crc:08x}, computed {crc:08x})"
        ));
    }
    Ok(payload)
}
