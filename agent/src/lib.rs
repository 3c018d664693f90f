//! The node agent, laid out as kubelet's packages: pod sources
//! ([`config`]: the static folder and the API server) feed the sync loop
//! ([`kubelet`]), which hands desired pods to one worker per pod
//! ([`pod_workers`]); each worker observes its pod through CRI
//! ([`runtime`]), asks the pure [`plan`] what to do, applies it with
//! [`lifecycle`] hooks, [`volumes`] and the [`prober`], and publishes its
//! status ([`status`]). [`pleg`] wakes workers when the runtime's
//! containers change; [`eviction`], [`events`], [`oom`], [`logs`],
//! [`images`], [`stats`], [`nodestatus`], [`certificate`] and [`server`]
//! do the rest; [`kube`] is only the API client. It talks to the runtime
//! only through CRI, keeps no state of its own that CRI, the pod folder and
//! the API server's checkpoint cannot rebuild, and can be killed at any
//! moment: a restarted agent recognises its containers by their labels and
//! spec hash and restarts nothing that is healthy.
//!
//! Pure modules (no tokio, nix, tonic or hyper; tested without root) are
//! listed in `tests/architecture.rs` with every arrow between modules.

pub mod allocation;
pub mod backoff;
pub mod certificate;
pub mod clock;
pub mod config;
pub mod credentialprovider;
pub mod cri_config;
pub mod devicemanager;
pub mod deviceplugin;
pub mod events;
pub mod eviction;
pub mod health;
pub mod httpc;
pub mod images;
pub mod kube;
mod kubelet;
pub mod lifecycle;
pub mod logs;
pub mod metrics;
mod mutex;
pub mod nodestatus;
pub mod oom;
pub mod phase;
pub mod plan;
pub mod pleg;
pub mod pod;
pub mod pod_workers;
pub mod podresources;
pub mod probe;
pub mod prober;
pub mod qos;
pub mod reason;
pub mod runtime;
pub mod server;
pub mod stats;
pub mod statsapi;
pub mod status;
pub mod userns;
pub mod volumes;

pub use crate::kubelet::{Error, run};
