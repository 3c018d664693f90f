//! The agent's one clock: wall-clock time since the Unix epoch, because
//! CRI reports container creation, starts and exits in Unix nanoseconds
//! and pure code (back-off, plans, status) compares against those.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

/// Wall-clock time since the Unix epoch.
pub type Time = Duration;

pub fn now() -> Time {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}

/// [`now`] in nanoseconds, as CRI timestamps.
pub fn now_ns() -> i64 {
    i64::try_from(now().as_nanos()).unwrap_or(i64::MAX)
}

/// The current time as a jiff timestamp (k8s-openapi's jiff has no clock).
pub fn timestamp_now() -> Timestamp {
    Timestamp::from_nanosecond(i128::from(now_ns())).unwrap_or_default()
}
