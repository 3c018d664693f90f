//! Pod lifecycle, kubelet's `pkg/kubelet/lifecycle`: admission
//! ([`predicate`]) and the postStart / preStop hooks ([`handlers`]).

pub mod handlers;
pub mod predicate;
