//! What a plugin may touch: the per-Store host state and the one linker every
//! plugin is instantiated against. WASI is granted with nothing behind it (no
//! files, sockets, environment; clocks frozen, timers already elapsed), memory is
//! capped per Store, and the guest's log and stdio go to `tracing`.

use std::time::Duration;

use wasmtime::component::{HasSelf, Linker, Resource, ResourceTable};
use wasmtime::{Engine, ResourceLimiter, StoreContextMut};
use wasmtime_wasi::p2::{DynPollable, Pollable};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxView, WasiView};

use super::bindings::{v0_2, v0_3};
use super::memory::MemoryCap;
use super::stdio::{GuestOutput, LogGate};

/// The WASI clock interface whose timers are replaced (see [`linker`]). Must
/// name the version wasmtime-wasi defines, or shadowing would add a new
/// instance instead of replacing; `linker` checks that it exists.
const MONOTONIC_CLOCK: &str = "wasi:clocks/monotonic-clock@0.2.12";

/// Most host-side WASI resources (streams, pollables) one instance may hold at
/// once: they live in host memory, outside the linear-memory cap. A plugin needs
/// a handful; the bound stops one from filling the host until its deadline.
const MAX_HOST_RESOURCES: usize = 4096;

/// Time a call earns beyond its deadline per MiB of linear memory it grows.
/// Fresh pages are zeroed by the kernel when first touched, inside the call: a
/// window count whose hash table doubled to 529 MiB spent 2.1 s in one `process`
/// on the reference machine, 1.7 s of it in `clear_page` (about 8 ms per MiB
/// grown). Four times that leaves room for a loaded machine.
pub(super) const GRACE_PER_MIB_GROWN: Duration = Duration::from_millis(32);

/// Time a call earns beyond its deadline per MiB of linear memory it holds when
/// it starts. Some calls walk the whole state once: the first `snapshot` of a
/// round gathers every changed key (0.42-0.55 s for 700 k of 5 M keys, 3.2 s for
/// all 5 M, about 600 MiB held), a window firing sorts its keys, a restore fills
/// the tables. A guest that holds more may take longer; one that holds little
/// is stopped near its deadline. Both graces are bounded by the memory limit:
/// 2.5 s at the default 64 MiB.
pub(super) const GRACE_PER_MIB_HELD: Duration = Duration::from_millis(8);

/// The data of one operator instance's `Store`.
pub(super) struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    memory: MemoryCap,
    output: GuestOutput,
    /// Grace granted to this call so far, for the memory it held and grew.
    grace: Duration,
    /// Linear memory held when the call began.
    held: usize,
}

impl HostState {
    pub(super) fn new(log: LogGate, memory_bytes: usize) -> Self {
        let output = GuestOutput::new(log);
        let wasi = WasiCtx::builder()
            .stdout(output.stdout())
            .stderr(output.stderr())
            .wall_clock(FrozenClock)
            .monotonic_clock(FrozenClock)
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_HOST_RESOURCES);
        Self {
            wasi,
            table,
            memory: MemoryCap::new(memory_bytes),
            output,
            grace: Duration::ZERO,
            held: 0,
        }
    }

    pub(super) fn limiter(&mut self) -> &mut dyn ResourceLimiter {
        &mut self.memory
    }

    /// Forgets what the previous call left behind, so an error describes this call.
    pub(super) fn begin_call(&mut self) {
        self.memory.begin_call();
        self.output.clear_tail();
        self.grace = Duration::ZERO;
        self.held = self.memory.memory_in_use();
    }

    /// The grace this call has earned by the memory it held and grew and not yet
    /// been given; counts it as given. Zero when the deadline should stand.
    pub(super) fn claim_grace(&mut self) -> Duration {
        let mib = |bytes: usize| u32::try_from(bytes >> 20).unwrap_or(u32::MAX);
        let earned = GRACE_PER_MIB_GROWN
            .saturating_mul(mib(self.memory.grown()))
            .saturating_add(GRACE_PER_MIB_HELD.saturating_mul(mib(self.held)));
        let owed = earned.saturating_sub(self.grace);
        self.grace = earned;
        owed
    }

    /// The grace this call was given beyond its deadline.
    pub(super) fn grace(&self) -> Duration {
        self.grace
    }

    /// The size a memory growth was refused at during this call, if one was.
    pub(super) fn memory_denied(&self) -> Option<usize> {
        self.memory.denied()
    }

    /// Bytes of linear memory the guest holds now.
    pub(super) fn memory_in_use(&self) -> usize {
        self.memory.memory_in_use()
    }

    /// The last lines the guest wrote during this call, joined, if it wrote any.
    pub(super) fn output_tail(&self) -> Option<String> {
        self.output.tail()
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl HostState {
    /// One `weir:operator/log` message, of either world.
    fn log(&mut self, level: tracing::Level, message: &str) {
        let Some(message) = self.output.admit_log(message) else {
            return;
        };
        let operator = self.output.label();
        match level {
            tracing::Level::TRACE => tracing::trace!(target: "weir::plugin", operator, "{message}"),
            tracing::Level::DEBUG => tracing::debug!(target: "weir::plugin", operator, "{message}"),
            tracing::Level::INFO => tracing::info!(target: "weir::plugin", operator, "{message}"),
            tracing::Level::WARN => tracing::warn!(target: "weir::plugin", operator, "{message}"),
            tracing::Level::ERROR => tracing::error!(target: "weir::plugin", operator, "{message}"),
        }
    }
}

/// Each world's `log` import and its `types` interface (no functions; the generated
/// linker still asks for it), both served by [`HostState::log`].
macro_rules! log_import {
    ($($world:ident),*) => {$(
        impl $world::weir::operator::types::Host for HostState {}

        impl $world::weir::operator::log::Host for HostState {
            fn log(&mut self, level: $world::weir::operator::log::Level, message: String) {
                use $world::weir::operator::log::Level;
                let level = match level {
                    Level::Trace => tracing::Level::TRACE,
                    Level::Debug => tracing::Level::DEBUG,
                    Level::Info => tracing::Level::INFO,
                    Level::Warn => tracing::Level::WARN,
                    Level::Error => tracing::Level::ERROR,
                };
                HostState::log(self, level, &message);
            }
        }
    )*};
}
log_import!(v0_2, v0_3);

/// The linker every plugin is instantiated against: the `log` import of every world
/// (`weir:operator/log@0.2.0` and `@0.3.0`) and WASI 0.2, with timers that never
/// block (see [`ready_now`]).
pub(super) fn linker(engine: &Engine) -> wasmtime::Result<Linker<HostState>> {
    let mut linker = Linker::new(engine);
    v0_2::Operator::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |state| state)?;
    v0_3::Operator::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |state| state)?;
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;

    // A WASI sleep blocks the calling thread in the host, where the epoch deadline
    // cannot interrupt it. With the clock frozen, every timer has already elapsed.
    // Defining a timer without shadowing must fail: that proves MONOTONIC_CLOCK
    // names the instance wasmtime-wasi defined, rather than a new one no plugin imports.
    let redefined = linker
        .instance(MONOTONIC_CLOCK)?
        .func_wrap("subscribe-duration", |_, (_,): (u64,)| Ok(()));
    if redefined.is_ok() {
        wasmtime::bail!(
            "wasmtime-wasi does not define `{MONOTONIC_CLOCK}`: update MONOTONIC_CLOCK to its version"
        );
    }
    linker.allow_shadowing(true);
    let mut clocks = linker.instance(MONOTONIC_CLOCK)?;
    clocks.func_wrap("subscribe-duration", |store, (_,): (u64,)| {
        Ok((ready_now(store)?,))
    })?;
    clocks.func_wrap("subscribe-instant", |store, (_,): (u64,)| {
        Ok((ready_now(store)?,))
    })?;
    linker.allow_shadowing(false);
    Ok(linker)
}

/// A pollable that is always ready: the timer a frozen clock hands out.
struct Elapsed;

#[wasmtime_wasi::async_trait]
impl Pollable for Elapsed {
    async fn ready(&mut self) {}
}

fn ready_now(mut store: StoreContextMut<'_, HostState>) -> wasmtime::Result<Resource<DynPollable>> {
    let table = &mut store.data_mut().table;
    let elapsed = table.push(Elapsed)?;
    wasmtime_wasi::p2::subscribe(table, elapsed)
}

/// The wall clock reads the epoch and the monotonic clock one second, forever: a
/// plugin gets event time from records, never from the machine, so replays match.
/// (Not zero: Go's runtime refuses to start on a monotonic clock that reads 0.)
struct FrozenClock;

const FROZEN_MONOTONIC_NS: u64 = 1_000_000_000;

impl HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl HostMonotonicClock for FrozenClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }

    fn now(&self) -> u64 {
        FROZEN_MONOTONIC_NS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::stdio::LogLimits;

    #[test]
    fn a_call_earns_grace_for_the_memory_it_holds_and_grows_once() {
        let mut state = HostState::new(LogGate::new("t".into(), LogLimits::default()), 1 << 30);
        assert!(state.limiter().memory_growing(0, 100 << 20, None).unwrap());
        state.begin_call();
        assert_eq!(state.claim_grace(), GRACE_PER_MIB_HELD * 100);
        assert_eq!(state.claim_grace(), Duration::ZERO, "a grace is given once");
        assert!(state.limiter().memory_growing(100 << 20, 110 << 20, None).unwrap());
        assert_eq!(state.claim_grace(), GRACE_PER_MIB_GROWN * 10, "then what the growth earned");
        assert_eq!(state.grace(), GRACE_PER_MIB_HELD * 100 + GRACE_PER_MIB_GROWN * 10);
        state.begin_call();
        assert_eq!(state.grace(), Duration::ZERO);
        assert_eq!(state.claim_grace(), GRACE_PER_MIB_HELD * 110, "the next call holds all of it");
    }
}
