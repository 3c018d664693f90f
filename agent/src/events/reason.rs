//! The reasons of the events the agent records, as kubelet names them
//! (`pkg/kubelet/events/event.go`): clients and alerting match on them.
//! Pure.

// Containers.
pub const PULLING_IMAGE: &str = "Pulling";
pub const PULLED_IMAGE: &str = "Pulled";
pub const FAILED_TO_PULL_IMAGE: &str = "Failed";
pub const ERR_IMAGE_NEVER_PULL: &str = "ErrImageNeverPull";
pub const BACK_OFF: &str = "BackOff";
pub const CREATED_CONTAINER: &str = "Created";
pub const STARTED_CONTAINER: &str = "Started";
pub const FAILED_TO_CREATE_CONTAINER: &str = "Failed";
pub const FAILED_TO_START_CONTAINER: &str = "Failed";
pub const KILLING_CONTAINER: &str = "Killing";
pub const FAILED_POST_START_HOOK: &str = "FailedPostStartHook";
pub const FAILED_PRE_STOP_HOOK: &str = "FailedPreStopHook";
pub const CONTAINER_UNHEALTHY: &str = "Unhealthy";
pub const CONTAINER_PROBE_WARNING: &str = "ProbeWarning";

// Pods.
pub const FAILED_MOUNT_VOLUME: &str = "FailedMount";
pub const SANDBOX_CHANGED: &str = "SandboxChanged";
pub const FAILED_CREATE_POD_SANDBOX: &str = "FailedCreatePodSandBox";
pub const OUT_OF_PODS: &str = "OutOfpods";
// In-place pod resize (kubelet's `events/resize.go`).
pub const RESIZE_STARTED: &str = "ResizeStarted";
pub const RESIZE_DEFERRED: &str = "ResizeDeferred";
pub const RESIZE_ERROR: &str = "ResizeError";
pub const RESIZE_COMPLETED: &str = "ResizeCompleted";

// The node.
pub const INVALID_MANIFEST: &str = "InvalidManifest";
pub const FREE_DISK_SPACE_FAILED: &str = "FreeDiskSpaceFailed";
pub const SYSTEM_OOM: &str = "OOMKilling";
/// picolet's own: a static pod's new version was not Ready in time.
pub const STATIC_POD_ROLLED_BACK: &str = "RolledBack";
/// picolet's own: `picolet upgrade` put the previous binary back.
pub const UPGRADE_ROLLED_BACK: &str = "UpgradeRolledBack";
