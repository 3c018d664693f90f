//! The end-to-end tests: one test binary, one module per area. Most drive
//! the real `picolet` binary (its shim, its agent) as root; `require_root!`
//! skips them otherwise, and fails them when CI=true.
//!
//! One binary instead of one per area: the test code and the libraries are
//! linked once, not nineteen times (figures in the commit that made it).
//! Select an area with a nextest filter: `cargo nextest run --test e2e
//! boundary::`, or `-E 'test(/^probes::/)'`.

#[macro_use]
mod common;

mod agent;
mod boundary;
mod cni;
mod conformance;
mod cri_clients;
mod cri_features;
mod device_plugins;
mod devices;
mod housekeeping;
mod images;
mod images_bad_input;
mod isolation;
mod kubelet;
mod kubelet_api;
mod kubelet_devices;
mod kubelet_userns;
mod observability;
mod pod_features;
mod probes;
mod registry;
mod resize;
mod resources;
mod restarts;
mod rollback;
mod runtime;
mod streaming;
