//! `weir new <language> NAME`: writes a plugin skeleton and a job file for it into
//! `plugins/NAME` of the weir checkout (or a given directory). As it stands, the
//! skeleton builds with `scripts/build-plugins NAME` and passes `weir check`; the
//! author replaces its logic. The templates are in `host/templates/new/`.

use std::path::{Component, Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};

#[derive(Args)]
pub(super) struct NewArgs {
    /// The language of the operator.
    language: Language,
    /// The plugin's name: lowercase letters, digits and `-`, starting with a letter. It
    /// names the component (`target/plugins/NAME.wasm`), the job and its topics.
    name: String,
    /// Where to write it (default: `plugins/NAME` of the weir checkout around the
    /// current directory; only plugins there are built by `scripts/build-plugins`).
    #[arg(long)]
    dir: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
enum Language {
    Rust,
    Python,
    Js,
    C,
    Go,
}

/// The longest plugin name accepted: it becomes a job name, a topic prefix and a crate name.
const MAX_NAME_LEN: usize = 64;

/// One file of a skeleton: its path in the plugin's directory and its template.
type Template = (&'static str, &'static str);

const JOB: Template = ("job.toml", include_str!("../../templates/new/job.toml.in"));

fn templates(language: Language) -> &'static [Template] {
    match language {
        Language::Rust => &[
            ("Cargo.toml", include_str!("../../templates/new/rust/Cargo.toml.in")),
            ("src/lib.rs", include_str!("../../templates/new/rust/src/lib.rs.in")),
        ],
        Language::Python => &[("app.py", include_str!("../../templates/new/python/app.py.in"))],
        Language::Js => &[("operator.js", include_str!("../../templates/new/js/operator.js.in"))],
        Language::C => &[("operator.c", include_str!("../../templates/new/c/operator.c.in"))],
        Language::Go => &[
            ("go.mod", include_str!("../../templates/new/go/go.mod.in")),
            ("operator.go", include_str!("../../templates/new/go/operator.go.in")),
            // The world's canonical ABI by hand, the same for every Go operator.
            ("abi.go", include_str!("../../../plugins/go-window-count/abi.go")),
        ],
    }
}

/// Whether the skeleton keeps keyed state (its job routes by key then).
fn keeps_state(language: Language) -> bool {
    matches!(language, Language::Rust | Language::Python | Language::Js)
}

pub(super) fn run(args: NewArgs) -> anyhow::Result<()> {
    check_name(&args.name)?;
    let here = std::env::current_dir().context("reading the current directory")?;
    let root = checkout_root(&here)?;
    let dir = match &args.dir {
        Some(dir) => absolute(&here, dir),
        None => root.join("plugins").join(&args.name),
    };
    refuse_occupied(&dir)?;
    let values = Values::new(&args.name, &root, &dir, args.language);
    for (path, template) in templates(args.language).iter().chain([&JOB]) {
        let target = dir.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&target, values.fill(template)).with_context(|| format!("writing {}", target.display()))?;
    }
    println!("wrote {} ({} operator) and its job file {}", dir.display(), language_name(args.language), dir.join("job.toml").display());
    match dir.parent() == Some(&root.join("plugins")) {
        true => println!("build it: scripts/build-plugins {0}\ncheck it: target/release/weir check target/plugins/{0}.wasm --record 'k=hello@1'", args.name),
        false => println!("scripts/build-plugins builds only plugins under {}: build this one the way it does", root.join("plugins").display()),
    }
    Ok(())
}

fn language_name(language: Language) -> &'static str {
    match language {
        Language::Rust => "Rust",
        Language::Python => "Python",
        Language::Js => "JavaScript",
        Language::C => "C",
        Language::Go => "Go",
    }
}

fn check_name(name: &str) -> anyhow::Result<()> {
    let starts_with_letter = name.starts_with(|c: char| c.is_ascii_lowercase());
    let allowed = name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !starts_with_letter || !allowed || name.len() > MAX_NAME_LEN || name.ends_with('-') {
        bail!(
            "`{name}` cannot name a plugin: use lowercase letters, digits and `-` (not last), starting with a \
             letter, at most {MAX_NAME_LEN} characters, e.g. `click-dedup`"
        );
    }
    Ok(())
}

/// The weir checkout holding `start`: the skeletons build with its SDKs and scripts.
fn checkout_root(start: &Path) -> anyhow::Result<PathBuf> {
    let is_root = |dir: &Path| dir.join("wit/operator.wit").is_file() && dir.join("scripts/build-plugins").is_file();
    start.ancestors().find(|dir| is_root(dir)).map(Path::to_path_buf).with_context(|| {
        format!(
            "{} is not inside a weir checkout (a directory with wit/operator.wit and scripts/build-plugins): \
             run weir new from the checkout, which the skeleton builds with",
            start.display()
        )
    })
}

fn refuse_occupied(dir: &Path) -> anyhow::Result<()> {
    let occupied = std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some());
    if occupied || dir.is_file() {
        bail!("{} already exists and is not empty: choose another name or --dir", dir.display());
    }
    Ok(())
}

/// `path` made absolute against `base`, with `.` and `..` resolved by name.
fn absolute(base: &Path, path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in base.join(path).components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// What the templates' `{{...}}` placeholders stand for.
struct Values {
    name: String,
    type_name: String,
    /// From the plugin's directory to the checkout: relative inside it, else absolute.
    root: String,
    /// The plugin's directory as the checkout names it.
    dir: String,
    key_by: bool,
    /// A Rust skeleton inside the checkout but outside the workspace's member globs
    /// gets a workspace of its own, or cargo refuses to build it.
    own_workspace: bool,
}

impl Values {
    fn new(name: &str, root: &Path, dir: &Path, language: Language) -> Values {
        let inside = dir.strip_prefix(root).ok();
        let root_text = match inside {
            Some(relative) => vec![".."; relative.components().count()].join("/"),
            None => root.display().to_string(),
        };
        let member_parents = ["plugins", "plugins/bad", "plugins/upgrade"].map(|p| root.join(p));
        let member = dir.parent().is_some_and(|parent| member_parents.iter().any(|p| p == parent));
        Values {
            name: name.to_string(),
            type_name: name.split('-').map(capitalized).collect(),
            root: root_text,
            dir: inside.map_or_else(|| dir.display().to_string(), |relative| relative.display().to_string()),
            key_by: keeps_state(language),
            own_workspace: inside.is_some() && !member,
        }
    }

    fn fill(&self, template: &str) -> String {
        template
            .replace("{{name}}", &self.name)
            .replace("{{type}}", &self.type_name)
            .replace("{{root}}", &self.root)
            .replace("{{dir}}", &self.dir)
            .replace("{{key_by}}", if self.key_by { "true" } else { "false" })
            .replace("{{workspace}}", if self.own_workspace { "\n[workspace]\n" } else { "" })
    }
}

fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    chars.next().map(|first| first.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_types_and_bad_names_are_refused() {
        let values = Values::new("click-dedup2", Path::new("/w"), Path::new("/w/plugins/click-dedup2"), Language::Rust);
        assert_eq!(values.type_name, "ClickDedup2");
        assert_eq!(values.root, "../..");
        assert!(!values.own_workspace);
        assert!(Values::new("x", Path::new("/w"), Path::new("/w/ops/x"), Language::Rust).own_workspace);
        assert_eq!(Values::new("x", Path::new("/w"), Path::new("/elsewhere/x"), Language::C).root, "/w");
        for bad in ["", "Upper", "9lives", "a_b", "a-", "a b", &"a".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?} accepted");
        }
        assert!(check_name("a-1").is_ok());
    }
}
