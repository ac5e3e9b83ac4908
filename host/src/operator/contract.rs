//! What a component must look like to run as an operator: the exports of the
//! `operator` world of a `weir:operator` version this host speaks (0.2 or 0.3).
//! Checked once at load time so that a mismatch is a clear error, never a
//! failure mid-job.

use std::fmt;
use std::path::Path;
use std::sync::LazyLock;

use semver::Version;
use wasmtime::Engine;
use wasmtime::component::Component;
use wasmtime::component::types::ComponentItem;

use super::error::PluginError;

/// The WIT package every plugin is built against.
pub const PACKAGE: &str = "weir:operator";

/// The functions the `operator` world exports, in call order (the same names in
/// every version this host speaks).
pub const EXPORTS: [&str; 6] = ["init", "process", "on-watermark", "snapshot", "restore", "restored"];

const WIT_0_2: &str = include_str!("../../../wit/operator.wit");
const WIT_0_3: &str = include_str!("../../../wit/0.3/operator.wit");

/// A version of the `operator` world this host runs plugins of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum World {
    /// `wit/operator.wit`: one input, one output.
    V0_2,
    /// `wit/0.3/operator.wit`: named inputs and outputs, each record routed to one.
    V0_3,
}

impl World {
    /// Every world this host speaks, oldest first.
    pub const ALL: [World; 2] = [World::V0_2, World::V0_3];

    /// The newest world: what `weir new` templates and the SDKs target.
    pub const NEWEST: World = World::V0_3;

    /// The version its WIT file declares: the one source of truth.
    pub fn version(self) -> &'static Version {
        static VERSIONS: LazyLock<[Version; 2]> =
            LazyLock::new(|| [declared_version(WIT_0_2), declared_version(WIT_0_3)]);
        &VERSIONS[self as usize]
    }

    /// The world a plugin built against `version` runs as, if this host speaks one
    /// compatible with it ([`compatible`]).
    pub fn of(version: &Version) -> Option<World> {
        World::ALL.into_iter().find(|world| compatible(world.version(), version))
    }

    /// Whether an operator of this world can tell inputs apart and route records to
    /// outputs; a 0.2 operator has exactly one of each.
    pub fn has_ports(self) -> bool {
        self >= World::V0_3
    }
}

impl fmt::Display for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PACKAGE}@{}", self.version())
    }
}

/// The `package weir:operator@<semver>;` line of a WIT file.
fn declared_version(wit: &str) -> Version {
    wit.lines()
        .find_map(|line| {
            line.trim()
                .strip_prefix("package weir:operator@")?
                .strip_suffix(';')?
                .parse()
                .ok()
        })
        .expect("the WIT declares `package weir:operator@<semver>;`")
}

/// The newest `weir:operator` version this host speaks ([`World::NEWEST`]); it also
/// runs every other of [`World::ALL`].
pub fn host_version() -> &'static Version {
    World::NEWEST.version()
}

/// The versions this host speaks, for messages: `weir:operator@0.2.0 and weir:operator@0.3.0`.
pub(super) fn spoken() -> String {
    let names: Vec<String> = World::ALL.iter().map(World::to_string).collect();
    names.join(" and ")
}

/// Semver compatibility as Cargo and wasmtime's linker read it: the same major
/// version, and before 1.0 the same minor (0.1.x and 0.2.x may differ incompatibly).
pub fn compatible(host: &Version, plugin: &Version) -> bool {
    host.major == plugin.major && (host.major != 0 || host.minor == plugin.minor)
}

/// What a component imports and exports, once it has passed the checks.
pub(super) struct Surface {
    /// The world it runs as: that of the `weir:operator` version its imports name, or
    /// if it imports none, that whose `process` its own takes the parameters of.
    pub world: World,
    /// The `weir:operator` version named by its imports; `None` if it imports no
    /// `weir:operator` interface (its exports still match the world).
    pub version: Option<Version>,
    pub imports: Vec<String>,
    pub exports: Vec<String>,
}

/// Checks the component's imports and exports against the world it targets. The
/// exports' types are checked by the world's bindings (`plugin.rs`), also at load.
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
    // Each export's name, and for a function the number of its parameters.
    let exports: Vec<(String, Option<usize>)> = ty
        .exports(engine)
        .map(|(name, item)| {
            let params = match &item.ty {
                ComponentItem::ComponentFunc(func) => Some(func.params().len()),
                _ => None,
            };
            (name.to_owned(), params)
        })
        .collect();

    let (version, unsupported) = imported_version(path, &imports)?;
    let missing: Vec<String> = EXPORTS
        .iter()
        .filter(|want| !exports.iter().any(|(name, params)| name == *want && params.is_some()))
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
    let world = match &version {
        Some(version) => World::of(version).expect("imported_version accepts only spoken versions"),
        // 0.3's `process` takes the input's index before the batch.
        None => match exports.iter().find(|(name, _)| name == "process") {
            Some((_, Some(2))) => World::V0_3,
            _ => World::V0_2,
        },
    };
    Ok(Surface {
        world,
        version,
        imports,
        exports: exports.into_iter().map(|(name, _)| name).collect(),
    })
}

/// The newest `weir:operator` version the imports name (each must be one this host
/// speaks), and the imports this host does not provide.
fn imported_version(
    path: &Path,
    imports: &[String],
) -> Result<(Option<Version>, Vec<String>), PluginError> {
    let mut version: Option<Version> = None;
    let mut unsupported = Vec::new();
    for name in imports {
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
            if World::of(&plugin).is_none() {
                return Err(PluginError::IncompatibleVersion {
                    path: path.to_owned(),
                    plugin,
                    host: host_version().clone(),
                });
            }
            version = Some(version.map_or(plugin.clone(), |v| v.max(plugin)));
        } else if !name.starts_with("wasi:") {
            unsupported.push(name.clone());
        }
    }
    Ok((version, unsupported))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_come_from_the_wit() {
        assert!(WIT_0_2.contains(&format!("package weir:operator@{};", World::V0_2.version())));
        assert!(WIT_0_3.contains(&format!("package weir:operator@{};", World::V0_3.version())));
        assert_eq!(host_version(), World::V0_3.version());
        assert_eq!(World::V0_3.to_string(), "weir:operator@0.3.0");
        assert_eq!(spoken(), "weir:operator@0.2.0 and weir:operator@0.3.0");
    }

    #[test]
    fn each_spoken_version_picks_its_world() {
        let v = |s: &str| Version::parse(s).unwrap();
        assert_eq!(World::of(&v("0.2.0")), Some(World::V0_2));
        assert_eq!(World::of(&v("0.2.5")), Some(World::V0_2));
        assert_eq!(World::of(&v("0.3.1")), Some(World::V0_3));
        assert_eq!(World::of(&v("0.1.0")), None);
        assert_eq!(World::of(&v("0.4.0")), None);
        assert_eq!(World::of(&v("1.0.0")), None);
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
