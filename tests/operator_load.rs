//! A file that cannot run as an operator is refused at load time with an error
//! that names the file and says what is wrong: not Wasm, a core module, cut
//! short, another world, an incompatible weir:operator version.

#[path = "operator_common/mod.rs"]
mod common;

use std::path::Path;

use common::{load, plugin_path, runtime, scratch_file};
use weir::operator::{Plugin, PluginError};

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
