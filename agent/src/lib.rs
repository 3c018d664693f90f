//! The node agent, laid out as kubelet's managers: pod sources
//! ([`source`]) feed the sync loop ([`kubelet`]), which hands desired pods
//! to one worker per pod ([`pod_workers`]); each worker observes its pod
//! through CRI ([`runtime`]), asks the pure [`plan`] what to do, applies it
//! with [`hooks`], [`volumes`] and the [`prober`], and publishes its status
//! ([`status`]). [`pleg`] wakes workers when the runtime's containers
//! change; [`events`], [`oom`], [`logs`], [`image_gc`], [`stats`] and
//! [`server`] do the rest. It talks to the runtime only through CRI, keeps
//! no state of its own that CRI and the pod folder cannot rebuild, and can
//! be killed at any moment: a restarted agent recognises its containers by
//! their labels and spec hash and restarts nothing that is healthy.
//!
//! Pure modules (no tokio, nix, tonic or hyper; tested without root):
//! [`backoff`], [`clock`], [`cri_config`], [`kmsg`], [`manifest`],
//! [`metrics`], [`plan`], [`probe`], [`qos`], [`reason`], [`status::generate`],
//! [`validate`]. `tests/architecture.rs` holds every arrow between modules.

pub mod admit;
pub mod backoff;
pub mod clock;
pub mod cri_config;
pub mod events;
pub mod evict;
pub mod eviction;
pub mod health;
pub mod hooks;
pub mod httpc;
pub mod image_gc;
pub mod keyring;
pub mod kmsg;
pub mod kube;
mod kubelet;
pub mod logs;
pub mod manifest;
pub mod metrics;
mod mutex;
pub mod node;
pub mod objects;
pub mod oom;
pub mod plan;
pub mod pleg;
pub mod pod_workers;
pub mod probe;
pub mod prober;
pub mod projection;
pub mod qos;
pub mod reason;
pub mod runtime;
pub mod server;
pub mod source;
pub mod stats;
pub mod status;
pub mod validate;
pub mod volumes;
pub mod x509;

pub use crate::kubelet::{Error, run};
