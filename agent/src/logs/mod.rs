//! Container logs, kubelet's `pkg/kubelet/logs` and `kuberuntime/logs`:
//! rotation ([`rotation`]) and reading for `kubectl logs` ([`reader`]).

pub mod reader;
pub mod rotation;
