//! Images, kubelet's `pkg/kubelet/images`: garbage collection ([`gc`]).
//! The credentials pulls use are [`crate::credentialprovider`]'s.

pub mod gc;
