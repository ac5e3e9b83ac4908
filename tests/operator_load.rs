//! A file that cannot run as an operator is refused at load time with an error
//! that names the file and says what is wrong: not Wasm, a core module, cut
//! short, another world, an incompatible weir:operator version, too large, too
//! slow to compile. Compiled code is only taken from a cache nobody else can write.

use crate::operator_common as common;

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{load, plugin_path, runtime, scratch_file};
use weir::operator::{
    Compiled, LoadLimits, Plugin, PluginError, Runtime, RuntimeConfig, RuntimeError,
};

fn load_err(path: &Path) -> PluginError {
    match Plugin::load(runtime(), path) {
        Ok(_) => panic!("{} loaded but must be refused", path.display()),
        Err(err) => err,
    }
}

fn assert_names_file(err: &PluginError, path: &Path) {
    let message = err.to_string();
    assert!(
        message.contains(&path.display().to_string()),
        "the message must name {}: {message}",
        path.display()
    );
}

#[test]
fn a_core_module_is_refused_with_how_to_build_a_component() {
    let path = scratch_file("core-module.wasm", b"\0asm\x01\0\0\0");
    let err = load_err(&path);
    assert!(matches!(err, PluginError::CoreModule { .. }), "{err:?}");
    assert_names_file(&err, &path);
    assert!(
        err.to_string()
            .contains("cargo build --target wasm32-wasip2"),
        "{err}"
    );
}

#[test]
fn a_file_that_is_not_wasm_is_refused() {
    let path = scratch_file("not-wasm.wasm", b"#!/bin/sh\necho hello\n");
    let err = load_err(&path);
    assert!(matches!(err, PluginError::NotWasm { .. }), "{err:?}");
    assert_names_file(&err, &path);
}

#[test]
fn a_missing_file_is_refused() {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-such-plugin.wasm");
    let err = load_err(&path);
    assert!(matches!(err, PluginError::Read { .. }), "{err:?}");
    assert_names_file(&err, &path);
}

#[test]
fn a_truncated_component_is_refused() {
    let whole = std::fs::read(plugin_path("window-count")).expect("read window-count");
    for cut in [6, whole.len() / 2, whole.len() - 1] {
        let path = scratch_file(&format!("truncated-{cut}.wasm"), &whole[..cut]);
        let err = load_err(&path);
        assert!(
            matches!(err, PluginError::Truncated { .. }),
            "cut at {cut}: {err:?}"
        );
        assert_names_file(&err, &path);
    }
}

#[test]
fn a_component_of_another_world_is_refused_listing_what_is_missing() {
    let path = plugin_path("bad-other-world");
    let err = load_err(&path);
    let PluginError::WrongWorld { missing, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(!missing.is_empty());
    assert_names_file(&err, &path);
    for name in missing {
        assert!(err.to_string().contains(&format!("`{name}`")), "{err}");
    }
}

#[test]
fn a_newer_major_version_is_refused_naming_both_versions() {
    let path = plugin_path("bad-newer-major");
    let err = load_err(&path);
    let PluginError::IncompatibleVersion { plugin, host, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(plugin.major, 1);
    assert_eq!(host, weir::operator::host_version());
    let message = err.to_string();
    assert_names_file(&err, &path);
    assert!(
        message.contains(&format!("weir:operator@{plugin}"))
            && message.contains(&format!("weir:operator@{host}")),
        "{message}"
    );
}

#[test]
fn a_plugin_of_weir_operator_0_1_is_refused_naming_both_versions() {
    // window-count as weir at commit 7edcca0 built it, against weir:operator@0.1.0:
    // whole-state snapshots, which this host's keyed checkpoints cannot take.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/window-count-operator-0.1.wasm");
    let err = load_err(&path);
    let PluginError::IncompatibleVersion { plugin, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!((plugin.major, plugin.minor), (0, 1));
    let message = err.to_string();
    assert_names_file(&err, &path);
    assert!(
        message.contains("weir:operator@0.1.0") && message.contains(&format!("weir:operator@{}", weir::operator::host_version())),
        "{message}"
    );
}

#[test]
fn the_example_plugins_load_and_report_the_world() {
    for name in ["window-count", "session-sum"] {
        let info = load(name).info().clone();
        assert_eq!(info.package, "weir:operator");
        assert_eq!(
            info.version.as_ref(),
            Some(weir::operator::host_version()),
            "{name}"
        );
        for export in weir::operator::EXPORTS {
            assert!(
                info.exports.iter().any(|e| e == export),
                "{name} exports {export}"
            );
        }
    }
}

#[test]
fn a_plugin_over_the_size_limit_is_refused_before_it_is_read() {
    let path = plugin_path("py-filter");
    let small = LoadLimits {
        max_bytes: 1 << 20,
        ..LoadLimits::default()
    };
    let err = Plugin::load_with(runtime(), &path, small).err().expect("over 1 MiB");
    assert!(
        matches!(err, PluginError::TooLarge { max, .. } if max == 1 << 20),
        "{err:?}"
    );
    assert_names_file(&err, &path);
    assert!(err.to_string().contains("max_plugin_mb"), "{err}");
    // A device reports no size and never ends: refused without reading it.
    let zero = Path::new("/dev/zero");
    let err = load_err(zero);
    assert!(matches!(err, PluginError::NotAFile { .. }), "{err:?}");
    assert_names_file(&err, zero);
}

#[test]
fn compilation_past_its_deadline_is_refused_naming_the_bound() {
    // No cache, so the ~4 s compile of the Python component really runs.
    let uncached = Runtime::new(RuntimeConfig {
        cache_dir: None,
        ..RuntimeConfig::default()
    })
    .expect("runtime starts");
    let path = plugin_path("py-filter");
    let hasty = LoadLimits {
        compile_timeout: Duration::from_millis(100),
        ..LoadLimits::default()
    };
    let started = Instant::now();
    let err = Plugin::load_with(&uncached, &path, hasty).err().expect("too slow");
    assert!(started.elapsed() < Duration::from_secs(2), "waited {:?}", started.elapsed());
    assert!(matches!(err, PluginError::CompileTimeout { .. }), "{err:?}");
    assert_names_file(&err, &path);
    assert!(
        err.to_string().contains("within 100 ms") && err.to_string().contains("compile_timeout_ms"),
        "{err}"
    );
}

fn cache_runtime(dir: &Path) -> Result<Runtime, RuntimeError> {
    Runtime::new(RuntimeConfig {
        cache_dir: Some(dir.to_owned()),
        ..RuntimeConfig::default()
    })
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

#[test]
fn a_cache_directory_others_can_write_or_own_is_refused() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let dir = scratch.path().join("compiled");
    std::fs::create_dir(&dir).expect("mkdir");
    set_mode(&dir, 0o777);
    let err = cache_runtime(&dir).err().expect("a world-writable cache is refused");
    let message = err.to_string();
    assert!(
        message.contains(&dir.display().to_string())
            && message.contains("group or others may write it (mode 777)")
            && message.contains("WEIR_CACHE_DIR"),
        "{message}"
    );
    set_mode(&dir, 0o700);
    cache_runtime(&dir).expect("a private cache is used");
    let owned = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
    // SAFETY: chown(2) on a path we created, through a NUL-terminated copy of it.
    assert_eq!(unsafe { libc::chown(owned.as_ptr(), 65534, 65534) }, 0, "chown needs root");
    let err = cache_runtime(&dir).err().expect("another user's cache is refused");
    assert!(err.to_string().contains("belongs to uid 65534"), "{err}");
}

#[test]
fn a_cache_entry_others_could_have_written_is_ignored_and_replaced() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let dir = scratch.path().join("compiled");
    let runtime = cache_runtime(&dir).expect("runtime");
    let mode = std::fs::metadata(&dir).expect("created").permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "the cache directory is created private");
    let path = plugin_path("bad-trap");
    let fresh = Plugin::load(&runtime, &path).expect("loads");
    assert!(matches!(fresh.info().compiled, Compiled::Fresh(_)));
    let cached = Plugin::load(&runtime, &path).expect("loads");
    assert!(matches!(cached.info().compiled, Compiled::Cached(_)));
    let entries: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let entry = &entries[0];
    assert_eq!(std::fs::metadata(entry).unwrap().permissions().mode() & 0o777, 0o600);

    set_mode(entry, 0o666);
    let again = Plugin::load(&runtime, &path).expect("loads");
    assert!(
        matches!(again.info().compiled, Compiled::Fresh(_)),
        "a group/other-writable entry must not be mapped as code"
    );
    assert_eq!(std::fs::metadata(entry).unwrap().permissions().mode() & 0o777, 0o600, "replaced");
}
