//! Pods as kubelet's `pkg/kubelet/pod` keeps them: the mirror pods of
//! static pods ([`mirror`]).

pub mod mirror;
