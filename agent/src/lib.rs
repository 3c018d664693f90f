//! The node agent: pod sources, sync loop, probes, PLEG, status, eviction,
//! GC policy and HTTP endpoints. Talks to the runtime only through CRI.
//!
//! Not implemented yet: arrives with the agent issue. [`run`] says so.

/// Error returned while the agent does not exist yet.
#[derive(Debug)]
pub struct NotImplemented;

impl std::fmt::Display for NotImplemented {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the agent is not implemented yet (static pods arrive with the agent issue)")
    }
}

impl std::error::Error for NotImplemented {}

/// Runs the agent. Today it only reports that it does not exist yet.
pub fn run() -> Result<(), NotImplemented> {
    Err(NotImplemented)
}
