//! The CRI v1 API (`runtime.v1`) and picolet's unix-socket plumbing.
//!
//! A dumb leaf crate: the generated CRI types, clients and servers come from
//! the crates.io crate `k8s-cri` and are re-exported as [`v1`]; picolet's own
//! management API (what CRI has no verb for, like importing an archive) is in
//! [`picolet`]. [`connect`] dials a unix socket; [`listen`] binds one with
//! mode 0600 for a tonic server, each connection read through
//! [`authority::AuthorityFix`] so that every gRPC client is served, whatever
//! `:authority` it sends (grpc-go 1.58's percent-encoded socket path).

pub mod authority;
pub mod log;
mod socket;
/// CRI streaming on the wire: SPDY/3.1 and the remotecommand and
/// portforward subprotocols (the shim serves them, `picolet ctl` speaks them).
pub mod streaming;

pub use k8s_cri::v1;
pub use socket::{SocketError, connect, listen};
/// The client channel type [`connect`] returns.
pub use tonic::transport::Channel;

/// kubelet's device plugin API (`v1beta1`): the Registration service the
/// agent serves and the DevicePlugin service plugins serve.
#[allow(clippy::doc_lazy_continuation, missing_docs)]
pub mod deviceplugin {
    tonic::include_proto!("v1beta1");
}

/// kubelet's pod-resources API (`v1`): the devices pods hold, for
/// monitoring agents.
#[allow(clippy::doc_lazy_continuation, missing_docs)]
pub mod podresources {
    tonic::include_proto!("v1");
}

/// picolet's own management API (`picolet.v1`).
#[allow(clippy::doc_lazy_continuation, missing_docs)]
pub mod picolet {
    tonic::include_proto!("picolet.v1");
}
