//! The node's certificates, kubelet's `pkg/kubelet/certificate`: the
//! client certificate from TLS bootstrap ([`bootstrap`]), the API port's
//! serving certificate ([`serving`]) and the DER both are built from
//! ([`x509`]).

pub mod bootstrap;
pub mod serving;
pub mod x509;
