//! A pod's phase as the API writes it (`core/v1` `PodPhase`); clients match
//! on these words. Pure.

pub const PENDING: &str = "Pending";
pub const RUNNING: &str = "Running";
pub const SUCCEEDED: &str = "Succeeded";
pub const FAILED: &str = "Failed";

/// A pod in this phase runs nothing again (`Succeeded` or `Failed`).
pub fn is_terminal(phase: &str) -> bool {
    phase == SUCCEEDED || phase == FAILED
}
