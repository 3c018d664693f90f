//! The reasons a container waits, as kubelet names them (shown in
//! `state.waiting.reason`; clients such as kubectl match on them), and
//! those of a pod's status.

/// The reason of a pod the eviction manager ended (`status.reason`, and
/// its event).
pub const EVICTED: &str = "Evicted";
/// A pod asking for `supplementalGroupsPolicy: Strict` on a runtime
/// without it (kubelet's admission).
pub const SUPPLEMENTAL_GROUPS_POLICY_NOT_SUPPORTED: &str = "SupplementalGroupsPolicyNotSupported";

pub const CRASH_LOOP_BACK_OFF: &str = "CrashLoopBackOff";
pub const CONTAINER_CREATING: &str = "ContainerCreating";
pub const POD_INITIALIZING: &str = "PodInitializing";
pub const ERR_IMAGE_PULL: &str = "ErrImagePull";
pub const IMAGE_PULL_BACK_OFF: &str = "ImagePullBackOff";
pub const ERR_IMAGE_NEVER_PULL: &str = "ErrImageNeverPull";
pub const CREATE_CONTAINER_CONFIG_ERROR: &str = "CreateContainerConfigError";
pub const CREATE_CONTAINER_ERROR: &str = "CreateContainerError";
pub const RUN_CONTAINER_ERROR: &str = "RunContainerError";
