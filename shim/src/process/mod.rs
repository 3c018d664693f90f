//! Processes the shim starts: the spawner that forks them
//! ([`spawner`], [`spawner_client`]), each container's `picolet monitor`
//! ([`monitor`]) and the container's own init ([`init`], with [`nsexec`]
//! for exec), and a shared-PID pod's PID 1 ([`pod_init`]). Post-fork code:
//! no tokio here. Their errors are one [`ChildError`], which crosses the
//! fork's pipes as JSON.

pub mod init;
pub mod monitor;
pub mod nsexec;
pub mod pod_init;
pub mod spawner;
pub(crate) mod spawner_client;

pub use crate::host::ChildError;
