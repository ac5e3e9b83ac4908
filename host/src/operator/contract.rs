//! What a component must look like to run as an operator: the exports of the
//! `operator` world and a `weir:operator` version this host speaks. Checked once
//! at load time so that a mismatch is a clear error, never a failure mid-job.

use std::path::Path;
use std::sync::LazyLock;

use semver::Version;
use wasmtime::Engine;
use wasmtime::component::Component;
use wasmtime::component::types::ComponentItem;

use super::error::PluginError;

/// The WIT package every plugin is built against.
pub const PACKAGE: &str = "weir:operator";

/// The functions the `operator` world exports, in call order.
pub const EXPORTS: [&str; 6] = ["init", "process", "on-watermark", "snapshot", "restore", "restored"];

const WIT: &str = include_str!("../../../wit/operator.wit");

/// The version of `wit/operator.wit` this host was built with: the one source of truth.
pub fn host_version() -> &'static Version {
    static VERSION: LazyLock<Version> = LazyLock::new(|| {
        WIT.lines()
            .find_map(|line| {
                line.trim()
                    .strip_prefix("package weir:operator@")?
                    .strip_suffix(';')?
                    .parse()
                    .ok()
            })
            .expect("wit/operator.wit declares `package weir:operator@<semver>;`")
    });
    &VERSION
}

/// Semver compatibility as Cargo and wasmtime's linker read it: the same major
/// version, and before 1.0 the same minor (0.1.x and 0.2.x may differ incompatibly).
pub fn compatible(host: &Version, plugin: &Version) -> bool {
    host.major == plugin.major && (host.major != 0 || host.minor == plugin.minor)
}

/// What a component imports and exports, once it has passed the checks.
pub(super) struct Surface {
    /// The `weir:operator` version named by its imports; `None` if it imports no
    /// `weir:operator` interface (its exports still match the world).
    pub version: Option<Version>,
    pub imports: Vec<String>,
    pub exports: Vec<String>,
}

/// Checks the component's imports and exports against the world.
pub(super) fn check(
    path: &Path,
    engine: &Engine,
    component: &Component,
) -> Result<Surface, PluginError> {
    let ty = component.component_type();
    let imports: Vec<String> = ty
        .imports(engine)
        .map(|(name, _)| name.to_owned())
        .collect();
    let exports: Vec<(String, bool)> = ty
        .exports(engine)
        .map(|(name, item)| {
            (
                name.to_owned(),
                matches!(item.ty, ComponentItem::ComponentFunc(_)),
            )
        })
        .collect();

    let mut version = None;
    let mut unsupported = Vec::new();
    for name in &imports {
        if let Some(interface) = name
            .strip_prefix(PACKAGE)
            .and_then(|rest| rest.strip_prefix('/'))
        {
            let plugin = interface
                .split_once('@')
                .and_then(|(_, v)| v.parse::<Version>().ok());
            let Some(plugin) = plugin else {
                // An unversioned or unparsable name cannot be matched against ours.
                unsupported.push(name.clone());
                continue;
            };
            if !compatible(host_version(), &plugin) {
                return Err(PluginError::IncompatibleVersion {
                    path: path.to_owned(),
                    plugin,
                    host: host_version().clone(),
                });
            }
            version = Some(version.map_or(plugin.clone(), |v: Version| v.max(plugin)));
        } else if !name.starts_with("wasi:") {
            unsupported.push(name.clone());
        }
    }

    let missing: Vec<String> = EXPORTS
        .iter()
        .filter(|want| {
            !exports
                .iter()
                .any(|(name, is_func)| name == *want && *is_func)
        })
        .map(|want| (*want).to_owned())
        .collect();
    if !missing.is_empty() {
        return Err(PluginError::WrongWorld {
            path: path.to_owned(),
            missing,
            found: exports.into_iter().map(|(name, _)| name).collect(),
        });
    }
    if !unsupported.is_empty() {
        return Err(PluginError::UnsupportedImports {
            path: path.to_owned(),
            imports: unsupported,
        });
    }
    Ok(Surface {
        version,
        imports,
        exports: exports.into_iter().map(|(name, _)| name).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_version_comes_from_the_wit() {
        assert!(WIT.contains(&format!("package weir:operator@{};", host_version())));
    }

    #[test]
    fn compatibility_follows_semver() {
        let v = |s: &str| Version::parse(s).unwrap();
        assert!(compatible(&v("0.2.0"), &v("0.2.3")));
        assert!(!compatible(&v("0.2.0"), &v("0.1.0")), "0.1 plugins keep whole-state snapshots");
        assert!(compatible(&v("0.1.0"), &v("0.1.0")));
        assert!(compatible(&v("0.1.0"), &v("0.1.7")));
        assert!(!compatible(&v("0.1.0"), &v("0.2.0")));
        assert!(!compatible(&v("0.1.0"), &v("1.0.0")));
        assert!(compatible(&v("1.0.0"), &v("1.4.2")));
        assert!(!compatible(&v("1.0.0"), &v("2.0.0")));
    }
}
