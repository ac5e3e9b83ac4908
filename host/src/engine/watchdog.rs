//! A guard on the checkpoint's Kafka commit. librdkafka's transactional calls take a
//! timeout but do not always honour it: `send_offsets_to_transaction` can block for
//! ever when the group coordinator goes away mid-call (librdkafka #5456). A weir that
//! hangs there looks alive and commits nothing, so a commit that outlives its bound
//! ends the process with an error instead. Nothing is lost: the next start recovers
//! from the last committed checkpoint.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How weir exits when a guarded call hangs (EX_TEMPFAIL: try again later).
const EXIT_HUNG: i32 = 75;

pub(super) struct Watchdog {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    /// The guarded call in progress: what it is and when it must have returned.
    armed: Option<(String, Instant)>,
    stopped: bool,
}

impl Watchdog {
    /// Starts the watching thread; it ends when the Watchdog is dropped.
    pub(super) fn start() -> Watchdog {
        let shared = Arc::new(Shared::default());
        let watched = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("weir-watchdog".to_string())
            .spawn(move || watch(&watched))
            .expect("spawning the watchdog thread");
        Watchdog { shared }
    }

    /// Runs `call`; if it has not returned within `limit`, logs `what` and exits.
    pub(super) fn guard<T>(&self, what: String, limit: Duration, call: impl FnOnce() -> T) -> T {
        self.set(Some((what, Instant::now() + limit)));
        let result = call();
        self.set(None);
        result
    }

    fn set(&self, armed: Option<(String, Instant)>) {
        self.shared.state.lock().expect("watchdog lock").armed = armed;
        self.shared.changed.notify_one();
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.shared.state.lock().expect("watchdog lock").stopped = true;
        self.shared.changed.notify_one();
    }
}

fn watch(shared: &Shared) {
    let mut state = shared.state.lock().expect("watchdog lock");
    while !state.stopped {
        let Some((what, deadline)) = &state.armed else {
            state = shared.changed.wait(state).expect("watchdog lock");
            continue;
        };
        let now = Instant::now();
        if now < *deadline {
            let wait = *deadline - now;
            state = shared.changed.wait_timeout(state, wait).expect("watchdog lock").0;
            continue;
        }
        tracing::error!(
            "{what} has not returned within its bound: librdkafka did not honour its own timeout \
             (a broker that went away mid-commit can cause this, librdkafka #5456); weir exits so \
             that it can be started again, which resumes from the last committed checkpoint with \
             nothing lost or repeated"
        );
        std::process::exit(EXIT_HUNG);
    }
}
