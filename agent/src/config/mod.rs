//! Pod sources, kubelet's `pkg/kubelet/config`: the static pod folder
//! ([`file`]) and the API server ([`apiserver`]), each checked by
//! [`validate`] after [`manifest`] decoded it.

pub mod apiserver;
pub mod file;
pub mod manifest;
pub mod validate;
