//! The operator exports of one instance, of whichever world its plugin targets, as the
//! calls `instance.rs` makes: a 0.2 plugin's `process` takes no input index and its
//! records all go to the one output; a 0.3 plugin's `init` also gets the ports.
//! Everything else is the same call in both worlds.

use wasmtime::Store;
use wasmtime::component::{Instance, InstancePre};

use super::bindings::{
    ProcessFunc, ProcessInputFunc, SnapshotFunc, WatermarkFunc, WireBatchResult, WireEmitted,
    WireStateChunk, v0_2, v0_3, with_wire,
};
use super::contract::World;
use super::instance::Tombstones;
use super::ports::Ports;
use super::sandbox::HostState;
use crate::batch::Batch;
use crate::chunk::StateChunk;

/// A plugin's pre-instantiation, type-checked against its world's exports.
pub(super) enum OperatorPre {
    V0_2(v0_2::OperatorPre<HostState>),
    V0_3(v0_3::OperatorPre<HostState>),
}

impl OperatorPre {
    /// Checks every export of `world` against its type; fails naming the first that
    /// differs.
    pub(super) fn new(world: World, pre: InstancePre<HostState>) -> wasmtime::Result<Self> {
        Ok(match world {
            World::V0_2 => OperatorPre::V0_2(v0_2::OperatorPre::new(pre)?),
            World::V0_3 => OperatorPre::V0_3(v0_3::OperatorPre::new(pre)?),
        })
    }

    pub(super) fn instance_pre(&self) -> &InstancePre<HostState> {
        match self {
            OperatorPre::V0_2(pre) => pre.instance_pre(),
            OperatorPre::V0_3(pre) => pre.instance_pre(),
        }
    }
}

/// The exports of one live instance.
pub(super) struct Exports {
    world: WorldExports,
    snapshot: SnapshotFunc,
}

enum WorldExports {
    V0_2 {
        operator: v0_2::Operator,
        process: ProcessFunc,
        on_watermark: WatermarkFunc<WireBatchResult>,
    },
    V0_3 {
        operator: v0_3::Operator,
        process: ProcessInputFunc,
        on_watermark: WatermarkFunc<WireEmitted>,
    },
}

type Returned<T> = wasmtime::Result<Result<T, String>>;

impl Exports {
    /// Looks the exports up in `instance`, a fresh instance of `pre`.
    pub(super) fn new(
        pre: &OperatorPre,
        store: &mut Store<HostState>,
        instance: &Instance,
    ) -> wasmtime::Result<Self> {
        let world = match pre {
            OperatorPre::V0_2(_) => WorldExports::V0_2 {
                operator: v0_2::Operator::new(&mut *store, instance)?,
                process: ProcessFunc::new(store, instance)?,
                on_watermark: WatermarkFunc::new(store, instance)?,
            },
            OperatorPre::V0_3(_) => WorldExports::V0_3 {
                operator: v0_3::Operator::new(&mut *store, instance)?,
                process: ProcessInputFunc::new(store, instance)?,
                on_watermark: WatermarkFunc::new(store, instance)?,
            },
        };
        Ok(Exports {
            world,
            snapshot: SnapshotFunc::new(store, instance)?,
        })
    }

    /// `init`, with the port names if the world has them (a 0.2 plugin's instance
    /// was refused other ports than one of each before it started).
    pub(super) fn init(
        &self,
        store: &mut Store<HostState>,
        config: &[(&str, &str)],
        ports: &Ports,
    ) -> Returned<()> {
        match &self.world {
            WorldExports::V0_2 { operator, .. } => operator.call_init(store, config),
            WorldExports::V0_3 { operator, .. } => {
                let inputs: Vec<&str> = ports.inputs.iter().map(String::as_str).collect();
                let outputs: Vec<&str> = ports.outputs.iter().map(String::as_str).collect();
                operator.call_init(store, config, &inputs, &outputs)
            }
        }
    }

    /// `process` of a batch that arrived on `input` (always 0 for a 0.2 plugin).
    pub(super) fn process(
        &self,
        store: &mut Store<HostState>,
        input: u32,
        batch: &Batch,
        tombstones: Tombstones,
    ) -> Returned<WireEmitted> {
        match &self.world {
            WorldExports::V0_2 { process, .. } => {
                debug_assert_eq!(input, 0, "a 0.2 operator has one input");
                let emitted = with_wire(batch, tombstones, |wire| process.call(store, wire))?;
                Ok(emitted.map(WireEmitted::from))
            }
            WorldExports::V0_3 { process, .. } => {
                with_wire(batch, tombstones, |wire| process.call(store, input, wire))
            }
        }
    }

    pub(super) fn on_watermark(
        &self,
        store: &mut Store<HostState>,
        watermark: i64,
    ) -> Returned<WireEmitted> {
        match &self.world {
            WorldExports::V0_2 { on_watermark, .. } => {
                Ok(on_watermark.call(store, watermark)?.map(WireEmitted::from))
            }
            WorldExports::V0_3 { on_watermark, .. } => on_watermark.call(store, watermark),
        }
    }

    pub(super) fn snapshot(
        &self,
        store: &mut Store<HostState>,
        max_bytes: u32,
    ) -> Returned<WireStateChunk> {
        self.snapshot.call(store, max_bytes)
    }

    pub(super) fn restore(&self, store: &mut Store<HostState>, chunk: &StateChunk) -> Returned<()> {
        match &self.world {
            WorldExports::V0_2 { operator, .. } => {
                let entries: Vec<v0_2::weir::operator::types::StateEntry> =
                    chunk.entries().iter().map(Into::into).collect();
                let wire = v0_2::weir::operator::types::StateChunkParam {
                    data: chunk.data(),
                    entries: &entries,
                };
                operator.call_restore(store, wire)
            }
            WorldExports::V0_3 { operator, .. } => {
                let entries: Vec<v0_3::weir::operator::types::StateEntry> =
                    chunk.entries().iter().map(Into::into).collect();
                let wire = v0_3::weir::operator::types::StateChunkParam {
                    data: chunk.data(),
                    entries: &entries,
                };
                operator.call_restore(store, wire)
            }
        }
    }

    pub(super) fn restored(&self, store: &mut Store<HostState>, watermark: i64) -> Returned<()> {
        match &self.world {
            WorldExports::V0_2 { operator, .. } => operator.call_restored(store, watermark),
            WorldExports::V0_3 { operator, .. } => operator.call_restored(store, watermark),
        }
    }
}
