//! Waiting on events instead of for times: [`eventually`] (and
//! [`eventually_async`] in async tests) polls until something happens,
//! [`consistently`] checks that something keeps holding for a while — the
//! one place a test may spend a fixed time, because the time is what it
//! tests (a pod that must stay up, a call that must not return yet).

use std::fmt::Display;
use std::time::{Duration, Instant};

/// How long to wait and how often to look. A `Duration` converts to this
/// with the usual poll interval.
#[derive(Clone, Copy, Debug)]
pub struct Patience {
    pub timeout: Duration,
    pub poll: Duration,
}

/// The usual poll interval: cheap for a file or `/proc`, a few requests a
/// second to a server under test.
pub const POLL: Duration = Duration::from_millis(20);

impl From<Duration> for Patience {
    fn from(timeout: Duration) -> Self {
        Self {
            timeout,
            poll: POLL,
        }
    }
}

/// One look of a probe: there, with its value, or not yet, with what was
/// seen instead (empty when the probe says nothing).
pub enum Look<T> {
    There(T),
    NotYet(String),
}

/// What a probe answers: `bool` (there yet?), `Option<T>` (the value once
/// there), or `Result<T, E>` (the value, or what was seen instead: the
/// last one is in the timeout's message).
pub trait Ready {
    type Value;
    fn ready(self) -> Look<Self::Value>;
}

impl Ready for bool {
    type Value = ();
    fn ready(self) -> Look<()> {
        if self {
            Look::There(())
        } else {
            Look::NotYet(String::new())
        }
    }
}

impl<T> Ready for Option<T> {
    type Value = T;
    fn ready(self) -> Look<T> {
        self.map_or_else(|| Look::NotYet(String::new()), Look::There)
    }
}

impl<T, E: Display> Ready for Result<T, E> {
    type Value = T;
    fn ready(self) -> Look<T> {
        match self {
            Ok(v) => Look::There(v),
            Err(seen) => Look::NotYet(seen.to_string()),
        }
    }
}

fn timed_out(what: &dyn Display, timeout: Duration, last: &str, context: String) -> ! {
    let last = if last.is_empty() {
        String::new()
    } else {
        format!("last seen: {last}\n")
    };
    panic!("timed out after {timeout:?} waiting for {what}\n{last}{context}")
}

/// Polls `probe` until it is ready and returns its value; after the
/// timeout, panics naming `what`, the last thing the probe saw and what
/// `context` says then (a log).
pub fn eventually<R: Ready>(
    what: impl Display,
    patience: impl Into<Patience>,
    mut probe: impl FnMut() -> R,
    context: impl FnOnce() -> String,
) -> R::Value {
    let Patience { timeout, poll } = patience.into();
    let deadline = Instant::now() + timeout;
    loop {
        let last = match probe().ready() {
            Look::There(v) => return v,
            Look::NotYet(last) => last,
        };
        if Instant::now() >= deadline {
            timed_out(&what, timeout, &last, context());
        }
        std::thread::sleep(poll);
    }
}

/// [`eventually`] for a probe that awaits (a gRPC call); sleeps on tokio's
/// timer between tries.
pub async fn eventually_async<R: Ready>(
    what: impl Display,
    patience: impl Into<Patience>,
    mut probe: impl AsyncFnMut() -> R,
    context: impl FnOnce() -> String,
) -> R::Value {
    let Patience { timeout, poll } = patience.into();
    let deadline = Instant::now() + timeout;
    loop {
        let last = match probe().await.ready() {
            Look::There(v) => return v,
            Look::NotYet(last) => last,
        };
        if Instant::now() >= deadline {
            timed_out(&what, timeout, &last, context());
        }
        tokio::time::sleep(poll).await;
    }
}

/// Checks `holds` every poll for `period` and panics (naming `what`, when
/// it stopped holding and `context`) the first time it does not. Sync: in
/// an async test it blocks its worker thread, so the test must run on the
/// multi-thread runtime when spawned tasks have to make progress meanwhile.
pub fn consistently(
    what: impl Display,
    period: Duration,
    mut holds: impl FnMut() -> bool,
    context: impl FnOnce() -> String,
) {
    let start = Instant::now();
    loop {
        if !holds() {
            panic!(
                "{what} stopped holding after {:?} of {period:?}\n{}",
                start.elapsed(),
                context()
            );
        }
        if start.elapsed() >= period {
            return;
        }
        std::thread::sleep(POLL);
    }
}

/// Whether `done` comes true within `timeout`, polled; never panics. For
/// clean-up (drops, a child's grace period), where a second panic would
/// abort the test binary and a timeout only means "kill harder".
pub fn within(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(POLL);
    }
}
