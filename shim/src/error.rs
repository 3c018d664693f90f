//! The one mapping from the shim's errors to gRPC status codes.

use images::Error as ImageError;
use tonic::{Code, Status};

/// Errors the shim's services return.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Image(#[from] ImageError),
    /// A registry pull failed: the message names the reference, the
    /// registry and the HTTP status or reason.
    #[error(transparent)]
    Pull(#[from] registry::Error),
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    AlreadyExists(String),
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("{0}")]
    DeadlineExceeded(String),
    #[error("{0}")]
    ResourceExhausted(String),
    #[error("{0} is not implemented by picolet yet")]
    Unimplemented(&'static str),
    /// A file-system call on `path` failed: the path and the I/O error
    /// (its kind included) stay apart for callers and logs.
    #[error("internal error: {op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// A system call on `path` failed (mount, umount).
    #[error("internal error: {op} {}: {source}", path.display())]
    Sys {
        op: &'static str,
        path: std::path::PathBuf,
        source: nix::Error,
    },
    /// A system call that names no one path failed (unshare, kill, pipe).
    #[error("internal error: {op}: {source}")]
    Errno { op: String, source: nix::Error },
    /// An I/O call that names no one path failed: a thread or helper
    /// process that did not start, a signal through a pidfd, a socket.
    #[error("internal error: {op}: {source}")]
    Os { op: String, source: std::io::Error },
    /// JSON the shim makes itself did not encode or decode.
    #[error("internal error: {op}: {source}")]
    Json {
        op: String,
        source: serde_json::Error,
    },
    /// A record on disk that does not decode.
    #[error("internal error: corrupt state file {}: {source}", path.display())]
    Corrupt {
        path: std::path::PathBuf,
        source: serde_json::Error,
    },
    /// A worker task panicked or was cancelled.
    #[error("internal error: {op}: {source}")]
    Task {
        op: String,
        source: tokio::task::JoinError,
    },
    /// A host helper's own typed error (`host` comes before this module,
    /// so it arrives boxed; `source()` reaches it).
    #[error("internal error: {op}: {source}")]
    Host {
        op: &'static str,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Post-fork code failed (the container's monitor or init): its
    /// report, a `host::ChildError` (boxed as `host`'s errors arrive here;
    /// [`Error::child_report`] reaches it), the errno it carried as the
    /// source (an `io::Error`, its kind kept), and the ERROR lines of the
    /// monitor's log (with a leading space, or empty).
    #[error("internal error: create container: {report}{log}")]
    Child {
        report: Box<dyn std::error::Error + Send + Sync>,
        #[source]
        errno: Option<std::io::Error>,
        log: String,
    },
    /// Pod networking: a bad CNI config, a plugin that failed.
    #[error("pod network: {0}")]
    Cni(#[from] crate::cni::CniError),
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// `.map_err(Error::io("create", &dir))`.
    pub fn io(op: &'static str, path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.to_path_buf();
        move |source| Error::Io { op, path, source }
    }

    /// `.map_err(Error::errno("unshare pod namespaces"))`.
    pub fn errno(op: impl Into<String>) -> impl FnOnce(nix::Error) -> Error {
        let op = op.into();
        move |source| Error::Errno { op, source }
    }

    /// `.map_err(Error::os("spawn namespace thread"))`.
    pub fn os(op: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let op = op.into();
        move |source| Error::Os { op, source }
    }

    /// `.map_err(Error::json("encode spec"))`.
    pub fn json(op: impl Into<String>) -> impl FnOnce(serde_json::Error) -> Error {
        let op = op.into();
        move |source| Error::Json { op, source }
    }

    /// `.map_err(Error::task("start container x"))`.
    pub fn task(op: impl Into<String>) -> impl FnOnce(tokio::task::JoinError) -> Error {
        let op = op.into();
        move |source| Error::Task { op, source }
    }

    /// What post-fork code reported (`report`, with its `errno`), and the
    /// ERROR lines of the monitor's log.
    pub fn child(
        report: impl std::error::Error + Send + Sync + 'static,
        errno: Option<i32>,
        log: &str,
    ) -> Error {
        let log = log.trim();
        Error::Child {
            report: Box::new(report),
            errno: errno.map(std::io::Error::from_raw_os_error),
            log: if log.is_empty() {
                String::new()
            } else {
                format!(" {log}")
            },
        }
    }

    /// The report of post-fork code, for a caller that knows its type.
    pub fn child_report<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            Error::Child { report, .. } => report.downcast_ref(),
            _ => None,
        }
    }

    /// `.map_err(Error::sys("mount rootfs at", &dir))`.
    pub fn sys(op: &'static str, path: &std::path::Path) -> impl FnOnce(nix::Error) -> Error {
        let path = path.to_path_buf();
        move |source| Error::Sys { op, path, source }
    }
}

impl From<Error> for Status {
    fn from(e: Error) -> Status {
        let code = match &e {
            Error::Pull(pe) => match pe.kind {
                registry::Kind::NotFound => Code::NotFound,
                registry::Kind::Unauthorized => Code::PermissionDenied,
                registry::Kind::Unreachable => Code::Unavailable,
                registry::Kind::Other => Code::Unknown,
            },
            Error::Image(ie) => match ie {
                ImageError::NotFound(_) => Code::NotFound,
                ImageError::InUse { .. } => Code::FailedPrecondition,
                ImageError::BadDigest(_)
                | ImageError::BadReference { .. }
                | ImageError::BadArchive { .. }
                | ImageError::BadEntry { .. }
                | ImageError::UnknownMediaType { .. }
                | ImageError::NoPlatform { .. }
                | ImageError::DigestMismatch { .. }
                | ImageError::SizeMismatch { .. }
                | ImageError::TooLarge(_) => Code::InvalidArgument,
                ImageError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                    Code::NotFound
                }
                ImageError::Io { .. } | ImageError::Metadata { .. } => Code::Internal,
            },
            Error::InvalidArgument(_) => Code::InvalidArgument,
            Error::NotFound(_) => Code::NotFound,
            Error::ResourceExhausted(_) => Code::ResourceExhausted,
            Error::AlreadyExists(_) => Code::AlreadyExists,
            Error::FailedPrecondition(_) => Code::FailedPrecondition,
            Error::DeadlineExceeded(_) => Code::DeadlineExceeded,
            Error::Unimplemented(_) => Code::Unimplemented,
            Error::Cni(crate::cni::CniError::Config(_)) => Code::FailedPrecondition,
            Error::Cni(crate::cni::CniError::BadBandwidth { .. }) => Code::InvalidArgument,
            // containerd's code for a plugin's failure.
            Error::Cni(_) => Code::Unknown,
            Error::Io { .. }
            | Error::Sys { .. }
            | Error::Errno { .. }
            | Error::Os { .. }
            | Error::Json { .. }
            | Error::Corrupt { .. }
            | Error::Task { .. }
            | Error::Host { .. }
            | Error::Child { .. }
            | Error::Internal(_) => Code::Internal,
        };
        Status::new(code, e.to_string())
    }
}

impl From<tokio::task::JoinError> for Error {
    fn from(source: tokio::task::JoinError) -> Self {
        Error::Task {
            op: "worker task failed".into(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes() {
        let s: Status = Error::Image(ImageError::InUse { image: "x".into() }).into();
        assert_eq!(s.code(), Code::FailedPrecondition);
        let s: Status = Error::Image(ImageError::BadReference {
            reference: "A".into(),
            why: "w".into(),
        })
        .into();
        assert_eq!(s.code(), Code::InvalidArgument);
        let s: Status = Error::Unimplemented("RunPodSandbox").into();
        assert_eq!(s.code(), Code::Unimplemented);
        assert!(s.message().contains("RunPodSandbox"));
    }

    #[test]
    fn a_child_error_keeps_its_errno_kind_and_the_log() {
        use crate::host::ChildError;
        let report = ChildError::errno_at("mount", "/proc on /x")(nix::Error::ENOENT);
        let e = Error::child(report.clone(), report.errno, " ERROR one | ERROR two ");
        let source = std::error::Error::source(&e)
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .map(std::io::Error::kind);
        assert_eq!(source, Some(std::io::ErrorKind::NotFound));
        assert_eq!(e.child_report::<ChildError>(), Some(&report));
        let s: Status = e.into();
        assert_eq!(s.code(), Code::Internal);
        assert_eq!(
            s.message(),
            "internal error: create container: mount /proc on /x: \
             No such file or directory (os error 2) ERROR one | ERROR two"
        );
        let bare = Error::child(ChildError::invalid("process.args", "empty"), None, "");
        assert!(std::error::Error::source(&bare).is_none());
        assert_eq!(
            bare.to_string(),
            "internal error: create container: process.args: empty"
        );
    }

    #[test]
    fn os_errors_keep_their_kind_and_name_the_step() {
        let e =
            Error::os("spawn namespace thread")(std::io::Error::from_raw_os_error(libc::EAGAIN));
        let Error::Os { source, .. } = &e else {
            panic!("{e:?}");
        };
        assert_eq!(source.kind(), std::io::ErrorKind::WouldBlock);
        let s: Status = e.into();
        assert_eq!(s.code(), Code::Internal);
        assert!(
            s.message()
                .starts_with("internal error: spawn namespace thread: ")
        );
        let s: Status = Error::errno("unshare pod namespaces")(nix::Error::EPERM).into();
        assert_eq!(s.code(), Code::Internal);
        assert!(
            s.message().contains("unshare pod namespaces: EPERM"),
            "{}",
            s.message()
        );
    }
}
