//! The CPU and memory a runtime reports of a container, as the pod
//! status shows them.

use cri_proto::v1::LinuxContainerResources;

use crate::plan::RuntimeResources;

/// A running container's resources from what the runtime reports
/// (kubelet's `toKubeContainerResources`): CPU limit from quota and
/// period, CPU request from shares, memory limit; 0 where unset.
pub fn of(r: &LinuxContainerResources) -> RuntimeResources {
    let cpu_limit = if r.cpu_period > 0 && r.cpu_quota > 0 {
        u64::try_from(r.cpu_quota.saturating_mul(1000) / r.cpu_period).unwrap_or(0)
    } else {
        0
    };
    let cpu_request = if r.cpu_shares >= 2 {
        u64::try_from((r.cpu_shares.saturating_mul(1000) + 1023) / 1024).unwrap_or(0)
    } else {
        0
    };
    RuntimeResources {
        cpu_request,
        cpu_limit,
        memory_limit: u64::try_from(r.memory_limit_in_bytes.max(0)).unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtimes_values_convert_back_as_kubelet_converts_them() {
        let r = LinuxContainerResources {
            cpu_period: 100_000,
            cpu_quota: 150_000,
            cpu_shares: 512,
            memory_limit_in_bytes: 64 << 20,
            ..Default::default()
        };
        assert_eq!(
            of(&r),
            RuntimeResources {
                cpu_request: 500,
                cpu_limit: 1500,
                memory_limit: 64 << 20
            }
        );
        // No quota, the minimum shares: nothing set.
        let none = LinuxContainerResources {
            cpu_period: 100_000,
            cpu_quota: -1,
            cpu_shares: 0,
            ..Default::default()
        };
        assert_eq!(of(&none), RuntimeResources::default());
    }
}
