//! A job's `state_dir` and the checkpoint store in it, for the life of the process. The
//! processes of a scaled-out job on one host share a state_dir: each claims the first
//! `process-<i>` slot no live process holds. A store that failed, or whose directory
//! was deleted under the running process, is opened anew; a vanished directory comes
//! back empty, and recovery rebuilds it from the changelog as on a new machine.

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::store::{CheckpointStore, StoreError};

/// How many processes of a scaled-out job may share one state_dir.
pub const MAX_PROCESSES_PER_STATE_DIR: u32 = 256;

/// The directory this process keeps its checkpoint store in, and how to open it again.
pub struct StateDir {
    job: String,
    /// The store's directory: the state_dir, or this process's slot of it.
    store_dir: PathBuf,
    /// A scaled-out process's slot lock file, held while the process lives.
    slot_lock: Option<(PathBuf, File)>,
}

impl StateDir {
    /// Claims `state_dir` for job `job` (with `shared`, its first free slot) and opens
    /// the store in it.
    pub fn claim(state_dir: &Path, job: &str, shared: bool) -> Result<(StateDir, CheckpointStore), StoreError> {
        if !shared {
            let claimed = StateDir { job: job.to_owned(), store_dir: state_dir.to_owned(), slot_lock: None };
            let store = open_settled(state_dir, job, Debris::Refuse)?;
            return Ok((claimed, store));
        }
        create_dir(state_dir)?;
        for slot in 0..MAX_PROCESSES_PER_STATE_DIR {
            // The slot's lock file comes first: RocksDB's own lock cannot tell a store
            // another process is creating from a damaged one.
            let lock_path = state_dir.join(format!("process-{slot}.lock"));
            let Some(lock) = try_lock(&lock_path)? else { continue };
            let store_dir = state_dir.join(format!("process-{slot}"));
            match open_settled(&store_dir, job, Debris::Clear) {
                Err(StoreError::Locked { .. }) => continue,
                opened => {
                    let claimed = StateDir { job: job.to_owned(), store_dir, slot_lock: Some((lock_path, lock)) };
                    return Ok((claimed, opened?));
                }
            }
        }
        Err(StoreError::Crowded { dir: state_dir.to_owned(), job: job.to_owned(), max: MAX_PROCESSES_PER_STATE_DIR })
    }

    /// Opens the store again, after the last handle to it was dropped. A directory that
    /// vanished is created anew, empty; one still being deleted (files left, the store's
    /// CURRENT gone) is given a moment to go. What a deletion left then is cleared from a
    /// scaled-out process's slot, and moved aside from a job's own state_dir, whose files
    /// may be what a repair needs (at its start, they are refused instead: they may be
    /// another's). A scaled-out process whose slot's lock file
    /// was deleted (with the state_dir) holds nothing any more: another process may have
    /// claimed that slot meanwhile, so it claims the first free one, as at its start; so
    /// it does when another live process turns out to work in its slot.
    pub fn reopen(&mut self) -> Result<CheckpointStore, StoreError> {
        let Some((lock_path, lock)) = &self.slot_lock else {
            return open_settled(&self.store_dir, &self.job, Debris::SetAside);
        };
        let why = match still_locks(lock_path, lock) {
            false => format!("{} was deleted", lock_path.display()),
            true => match open_settled(&self.store_dir, &self.job, Debris::Clear) {
                Err(StoreError::Locked { dir, detail }) => format!("{} is another process's ({detail})", dir.display()),
                opened => return opened,
            },
        };
        let state_dir = lock_path.parent().expect("a slot's lock file is in the state_dir").to_owned();
        tracing::warn!("{why}: claiming a slot of the state_dir {} anew", state_dir.display());
        let (claimed, store) = StateDir::claim(&state_dir, &self.job, true)?;
        *self = claimed;
        Ok(store)
    }

    /// The store's directory.
    pub fn store_dir(&self) -> &Path {
        &self.store_dir
    }
}

/// How long a directory whose deletion is under way may take to go.
const DELETION_WAIT: Duration = Duration::from_secs(5);

/// What [`wait_while_deleted`] saw.
#[derive(PartialEq)]
enum Settled {
    /// Nothing more to wait for: a store, no files, or the wait ran out.
    Quiet,
    /// A file appeared: another process writes into the directory.
    Written,
}

/// Waits (at most `DELETION_WAIT`) while `dir` holds files but no store and loses
/// them: what a deletion still running leaves. A directory that gains a file meanwhile is
/// not going: another process writes into it, and waiting would only let it fill.
fn wait_while_deleted(dir: &Path) -> Settled {
    let deadline = Instant::now() + DELETION_WAIT;
    let half_gone = |names: &BTreeSet<OsString>| !names.is_empty() && !names.contains(OsStr::new("CURRENT"));
    let mut seen = listing(dir);
    while half_gone(&seen) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        let now = listing(dir);
        if now.iter().any(|name| !seen.contains(name)) {
            return Settled::Written;
        }
        seen = now;
    }
    Settled::Quiet
}

/// What to do with the files a deletion of a store left behind when RocksDB wrote
/// into the directory while it went (the deletion then fails, and the files stay
/// without the CURRENT that names them).
#[derive(Clone, Copy, PartialEq)]
enum Debris {
    /// Leave them for `CheckpointStore::open` to refuse: at a job's start, its own
    /// state_dir may hold state nothing else does (an at-least-once job's, or one the
    /// changelog lost), and files this process did not write.
    Refuse,
    /// Delete them: a scaled-out process's slot holds nothing Kafka does not, since
    /// such a process recovers from Kafka alone.
    Clear,
    /// Move them to a directory beside it and go on with an empty store: a job's own
    /// store deleted under the running process. Nothing is destroyed, so what they hold
    /// stays at hand for a repair (an at-least-once job's state, or one the changelog
    /// lost); an exactly-once job rebuilds its state from the changelog.
    SetAside,
}

/// Opens the store in `dir`, allowing for a deletion of it under way (someone deleting
/// the state_dir while this process starts or reopens it): while `dir` holds files but
/// no store, or after an open that failed while files vanished from it, it waits and
/// tries again, for at most `DELETION_WAIT`. What is left then is cleared (`debris`)
/// if it is only RocksDB's files, or else `CheckpointStore::open` judges it. A slot
/// (`Debris::Clear`) that gains files while its store's CURRENT or MANIFEST is gone is
/// another live process's: `Locked`, its files left as they are.
fn open_settled(dir: &Path, job: &str, debris: Debris) -> Result<CheckpointStore, StoreError> {
    let deadline = Instant::now() + DELETION_WAIT;
    loop {
        let settled = wait_while_deleted(dir);
        if debris != Debris::Refuse {
            clear_debris(dir, debris, settled)?;
        }
        let before = listing(dir);
        match CheckpointStore::open(dir, job) {
            Err(error) if Instant::now() < deadline && !matches!(error, StoreError::Locked { .. }) && vanished(&before, dir) => {
                tracing::debug!("{} changed while it was opened ({error}); trying again", dir.display());
                std::thread::sleep(Duration::from_millis(50));
            }
            // A slot the deletion left with a CURRENT and MANIFEST naming table files it
            // took: as unreadable as one without them, and as much a cache.
            Err(StoreError::Unreadable { detail, .. })
                if debris == Debris::Clear && Instant::now() < deadline && only_rocksdb(dir) && !lock_held_elsewhere(&dir.join("LOCK")) =>
            {
                tracing::warn!("{} cannot be opened ({detail}): deleting it; this process's state comes back from Kafka", dir.display());
                delete_slot(dir)?;
            }
            done => return done,
        }
    }
}

/// Deletes `dir`, or moves it aside (`debris`), if it holds only RocksDB's files and no
/// CURRENT, or a CURRENT naming a MANIFEST that is gone: what is left of a store whose
/// deletion was interrupted, which no RocksDB can open. One another live process still
/// has open (its RocksDB holds the LOCK file) is that process's: `Locked`; so is a slot
/// (`Debris::Clear`) that gained files while it was waited on (`settled`), one whose
/// lock files a deletion of the state_dir took: its files are left as they are.
fn clear_debris(dir: &Path, debris: Debris, settled: Settled) -> Result<(), StoreError> {
    if listing(dir).is_empty() || !only_rocksdb(dir) || !lost_its_manifest(dir) {
        return Ok(());
    }
    if lock_held_elsewhere(&dir.join("LOCK")) {
        let detail = "another live process's RocksDB holds it, though its CURRENT file, or the MANIFEST that file names, is gone".to_owned();
        return Err(StoreError::Locked { dir: dir.to_owned(), detail });
    }
    if settled == Settled::Written && debris == Debris::Clear {
        return Err(written_into(dir, "while its store's CURRENT or MANIFEST was gone"));
    }
    let left = "holds what a deletion of its checkpoint store left (RocksDB's files without the CURRENT or MANIFEST that names them)";
    if debris == Debris::SetAside {
        return set_aside(dir, left);
    }
    tracing::warn!("{} {left}: deleting them; this process's state comes back from Kafka", dir.display());
    delete_slot(dir)
}

/// Deletes a scaled-out process's slot: the entries one listing names, then the
/// directory. Files that appear after that listing are another live process's writes
/// (one whose lock files a deletion of the state_dir took, and whose RocksDB still works
/// in the slot): the slot is that process's, `Locked`. A slot that keeps filling costs
/// one listing, never a chase.
fn delete_slot(dir: &Path) -> Result<(), StoreError> {
    let failed = |source| StoreError::ClearSlot { dir: dir.to_owned(), source };
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(failed(error)),
    };
    let paths: Vec<PathBuf> = entries.map(|entry| entry.map(|entry| entry.path())).collect::<Result<_, _>>().map_err(failed)?;
    for path in paths {
        let removed = match std::fs::remove_file(&path) {
            Err(error) if error.kind() == std::io::ErrorKind::IsADirectory => std::fs::remove_dir_all(&path),
            removed => removed,
        };
        match removed {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(failed(error)),
            _ => {}
        }
    }
    match std::fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::DirectoryNotEmpty => Err(written_into(dir, "while it was deleted")),
        Err(source) => Err(failed(source)),
    }
}

/// `dir` gained files `when`: another live process's RocksDB writes into it.
fn written_into(dir: &Path, when: &str) -> StoreError {
    let detail = format!("files appeared in it {when}: another live process's RocksDB writes into it");
    StoreError::Locked { dir: dir.to_owned(), detail }
}

/// Renames `dir` to a new name beside it; if that fails, leaves it for
/// `CheckpointStore::open` to judge.
fn set_aside(dir: &Path, left: &str) -> Result<(), StoreError> {
    let millis = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
    let mut aside = dir.as_os_str().to_owned();
    aside.push(format!(".left-{millis}"));
    let aside = PathBuf::from(aside);
    match std::fs::rename(dir, &aside) {
        Ok(()) => tracing::warn!(
            "{} {left}: moved them to {} and starting an empty store; an exactly-once job's state comes back from \
             Kafka; delete that directory once the job runs as it should",
            dir.display(),
            aside.display()
        ),
        Err(error) => tracing::warn!("{} {left}, and moving them aside failed: {error}", dir.display()),
    }
    Ok(())
}

/// Whether `dir` holds only the files RocksDB gives a store.
fn only_rocksdb(dir: &Path) -> bool {
    listing(dir).iter().all(|name| name == "CURRENT" || is_rocksdb_file(name))
}

/// Whether the store in `dir` has no CURRENT, or one naming a MANIFEST that is not there.
fn lost_its_manifest(dir: &Path) -> bool {
    match std::fs::read_to_string(dir.join("CURRENT")) {
        Ok(current) => !dir.join(current.trim_end()).is_file(),
        Err(error) => error.kind() == std::io::ErrorKind::NotFound,
    }
}

/// Whether another process holds the POSIX record lock RocksDB takes on a store's
/// LOCK file (`fcntl`, which `File::try_lock`'s `flock` does not see).
fn lock_held_elsewhere(lock: &Path) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(file) = std::fs::OpenOptions::new().read(true).write(true).open(lock) else { return false };
    // SAFETY: an all-zero `flock` is a valid value of this plain C struct.
    let mut query: libc::flock = unsafe { std::mem::zeroed() };
    query.l_type = libc::F_WRLCK as libc::c_short;
    query.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: F_GETLK on an open descriptor, with a pointer to a live `flock`.
    let asked = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETLK, &mut query) };
    asked == 0 && query.l_type != libc::F_UNLCK as libc::c_short
}

/// Whether `name` is one RocksDB gives the files of a store.
fn is_rocksdb_file(name: &std::ffi::OsStr) -> bool {
    let Some(name) = name.to_str() else { return false };
    let fixed = ["IDENTITY", "LOCK", "LOG"].contains(&name);
    // And the table files the store writes for RocksDB to take in.
    let prefixed = ["LOG.old.", "MANIFEST-", "OPTIONS-", super::store::INGEST_PREFIX].iter().any(|prefix| name.starts_with(prefix));
    let numbered = [".log", ".sst", ".blob", ".dbtmp"]
        .iter()
        .any(|suffix| name.strip_suffix(suffix).is_some_and(|stem| stem.parse::<u64>().is_ok()));
    fixed || prefixed || numbered
}

/// Whether a name of `before` is no longer in `dir` (RocksDB's open only adds files).
fn vanished(before: &BTreeSet<OsString>, dir: &Path) -> bool {
    let now = listing(dir);
    before.iter().any(|name| !now.contains(name))
}

/// The names in `dir` (none if it cannot be read).
fn listing(dir: &Path) -> BTreeSet<OsString> {
    let entries = std::fs::read_dir(dir).into_iter().flatten().flatten();
    entries.map(|entry| entry.file_name()).collect()
}

/// Whether the lock file at `path` is still the one `lock` holds (not deleted, nor
/// deleted and made anew).
fn still_locks(path: &Path, lock: &File) -> bool {
    use std::os::unix::fs::MetadataExt;
    let id = |metadata: &std::fs::Metadata| (metadata.dev(), metadata.ino());
    matches!((std::fs::metadata(path), lock.metadata()), (Ok(at_path), Ok(held)) if id(&at_path) == id(&held))
}

fn create_dir(dir: &Path) -> Result<(), StoreError> {
    std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir { dir: dir.to_owned(), source })
}

/// The lock file at `path`, locked; `None` when a live process holds it.
fn try_lock(path: &Path) -> Result<Option<File>, StoreError> {
    let failed = |source| StoreError::CreateDir { dir: path.to_owned(), source };
    let lock = File::create(path).map_err(failed)?;
    match lock.try_lock() {
        Ok(()) => Ok(Some(lock)),
        Err(TryLockError::WouldBlock) => Ok(None),
        Err(TryLockError::Error(e)) => Err(failed(e)),
    }
}
