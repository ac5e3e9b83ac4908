//! `weir-guest`: builds weir operator components from languages whose compilers emit
//! WASI preview 1 core modules (C with Debian's clang, Go with the standard toolchain).
//!
//! - `weir-guest c-bindings OUT_DIR` writes the C bindings of the `operator` world
//!   (`operator.h`, `operator.c` and `operator_component_type.o`, which carries the
//!   world's type into the linked module);
//! - `weir-guest component CORE.wasm -o OUT.wasm` wraps a core module into a component:
//!   it embeds the `operator` world's type unless the module carries one (Go modules
//!   do not), adapts WASI preview 1 imports with the reactor adapter of the wasmtime
//!   the host is built on, and validates the result.
//!
//! Both read the world from `wit/` (`--wit` to point elsewhere), so the bindings and
//! the component always agree with the contract the host checks.

mod arena;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use wasi_preview1_component_adapter_provider::{
    WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
};
use wit_component::{ComponentEncoder, StringEncoding};
use wit_parser::{Resolve, WorldId};

/// The world every operator exports.
const WORLD: &str = "operator";

#[derive(Parser)]
#[command(name = "weir-guest", about = "Builds weir operator components from C and Go")]
struct Cli {
    /// The WIT folder holding the operator world.
    #[arg(long, global = true, default_value = "wit")]
    wit: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Writes operator.h, operator.c and operator_component_type.o, the C bindings of
    /// the operator world (link all three).
    CBindings {
        /// Where to write them (created if missing).
        out_dir: PathBuf,
    },
    /// Wraps a WASI preview 1 reactor module into an operator component.
    Component {
        /// The core module (clang -mexec-model=reactor, or go build -buildmode=c-shared).
        core: PathBuf,
        /// The component to write.
        #[arg(short, long)]
        output: PathBuf,
    },
}

fn main() {
    let cli = Cli::parse();
    let outcome = match &cli.command {
        Command::CBindings { out_dir } => write_c_bindings(&cli.wit, out_dir),
        Command::Component { core, output } => write_component(&cli.wit, core, output),
    };
    if let Err(error) = outcome {
        eprintln!("weir-guest: error: {error:#}");
        std::process::exit(1);
    }
}

/// Parses the WIT folder and finds the operator world in it.
fn operator_world(wit: &Path) -> Result<(Resolve, WorldId)> {
    let mut resolve = Resolve::default();
    let (package, _) = resolve
        .push_dir(wit)
        .with_context(|| format!("cannot read the WIT package in {}", wit.display()))?;
    let world = resolve
        .select_world(&[package], Some(WORLD))
        .with_context(|| format!("{} has no world named `{WORLD}`", wit.display()))?;
    Ok((resolve, world))
}

fn write_c_bindings(wit: &Path, out_dir: &Path) -> Result<()> {
    let (mut resolve, world) = operator_world(wit)?;
    let options = wit_bindgen_c::Opts::default();
    let mut files = wit_bindgen_core::Files::default();
    options.build().generate(&mut resolve, world, &mut files)?;
    std::fs::create_dir_all(out_dir)
        .with_context(|| format!("cannot create {}", out_dir.display()))?;
    for (name, contents) in files.iter() {
        let path = out_dir.join(name);
        std::fs::write(&path, contents)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

fn write_component(wit: &Path, core: &Path, output: &Path) -> Result<()> {
    let module =
        std::fs::read(core).with_context(|| format!("cannot read {}", core.display()))?;
    let has_world_type = check_reactor(&module, core)?;
    let mut module = arena::add_adapter_realloc(module)?;
    let (resolve, world) = operator_world(wit)?;
    if !has_world_type {
        wit_component::embed_component_metadata(&mut module, &resolve, world, StringEncoding::UTF8)?;
    }
    let component = ComponentEncoder::default()
        .module(&module)?
        .adapter(WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER)?
        .validate(true)
        .encode()
        .with_context(|| {
            format!("{} does not fit the `{WORLD}` world of {}", core.display(), wit.display())
        })?;
    std::fs::write(output, component)
        .with_context(|| format!("cannot write {}", output.display()))
}

/// Refuses what is not a core module built as a reactor, naming the build flag: a
/// command module (one exporting `_start`) would run its `main` and exit instead of
/// waiting for the host's calls. True if the module carries a world's type (a
/// `component-type` custom section, as wit-bindgen's object files link in).
fn check_reactor(module: &[u8], path: &Path) -> Result<bool> {
    let mut exports_start = false;
    let mut has_world_type = false;
    for payload in wasmparser::Parser::new(0).parse_all(module) {
        match payload.with_context(|| format!("{} is not a WebAssembly module", path.display()))? {
            wasmparser::Payload::Version { encoding: wasmparser::Encoding::Component, .. } => {
                bail!("{} is already a component; give the core module", path.display())
            }
            wasmparser::Payload::CustomSection(section) => {
                has_world_type |= section.name().starts_with("component-type");
            }
            wasmparser::Payload::ExportSection(exports) => {
                for export in exports {
                    exports_start |= export?.name == "_start";
                }
            }
            _ => {}
        }
    }
    if exports_start {
        bail!(
            "{} is a command module (it exports `_start`): build it as a reactor, with \
             `-mexec-model=reactor` (clang) or `-buildmode=c-shared` (go build)",
            path.display()
        );
    }
    Ok(has_world_type)
}
