//! The one error of post-fork code (`crate::process`: the monitor, the
//! container's init, the exec helper; and the `host` and `seccomp` helpers
//! they call): what was being done, to what, and the errno or the detail
//! that says why. It crosses the fork as JSON — the init writes it into
//! its status pipe, the monitor puts it in its [`Handshake`] line — so the
//! shim gets the errno (and with it the `io::ErrorKind`), not only text.
//!
//! Defined here, below `process`, because `host` and `seccomp` return it
//! too; `crate::process::ChildError` is the same type.
//!
//! [`Handshake`]: crate::process::monitor::Handshake

use std::borrow::Cow;
use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// What post-fork code failed at: `step` (`mount`, `pivot_root`,
/// `setns`, `exec`; for a refused spec value, the spec's field), `path`
/// (the file, namespace or mount it was done to), and why: `errno` from
/// the kernel, or `detail` when no errno says it (a bad spec value, a
/// child's stderr). `within` names the larger step it was part of
/// (`mount /proc`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildError {
    pub step: Cow<'static, str>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within: Option<String>,
}

/// What is read of a status pipe or a handshake's error at most.
pub const WIRE_MAX: u64 = 4096;

impl ChildError {
    /// `step` failed; nothing more is known yet.
    pub fn new(step: impl Into<Cow<'static, str>>) -> ChildError {
        ChildError {
            step: step.into(),
            path: None,
            errno: None,
            detail: None,
            within: None,
        }
    }

    /// `step` failed with `detail` (no errno): a refusal, a bad value.
    pub fn detail(step: impl Into<Cow<'static, str>>, detail: impl Into<String>) -> ChildError {
        ChildError {
            detail: Some(detail.into()),
            ..ChildError::new(step)
        }
    }

    /// The spec's `field` is refused: `why`.
    pub fn invalid(field: impl Into<Cow<'static, str>>, why: impl Into<String>) -> ChildError {
        ChildError::detail(field, why)
    }

    /// `step` of `what` failed with `detail` (no errno).
    pub fn detail_at(
        step: impl Into<Cow<'static, str>>,
        what: impl fmt::Display,
        detail: impl Into<String>,
    ) -> ChildError {
        ChildError {
            path: Some(what.to_string()),
            ..ChildError::detail(step, detail)
        }
    }

    /// `.map_err(ChildError::errno("setsid"))`.
    pub fn errno(step: &'static str) -> impl FnOnce(nix::errno::Errno) -> ChildError {
        move |e| ChildError::new(step).with_errno(e as i32)
    }

    /// `.map_err(ChildError::errno_at("mount", "/proc"))`: a system call on
    /// `what` (a path, a namespace) failed.
    pub fn errno_at(
        step: &'static str,
        what: impl fmt::Display,
    ) -> impl FnOnce(nix::errno::Errno) -> ChildError {
        let what = what.to_string();
        move |e| ChildError::new(step).at(what).with_errno(e as i32)
    }

    /// `.map_err(ChildError::io("create", &path))`.
    pub fn io(step: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> ChildError {
        let path = path.display().to_string();
        move |e| ChildError::from_io(step, e).at(path)
    }

    /// `.map_err(ChildError::os("accept on the console socket"))`: an I/O
    /// call that names no one path.
    pub fn os(step: &'static str) -> impl FnOnce(std::io::Error) -> ChildError {
        move |e| ChildError::from_io(step, e)
    }

    /// The errno of `e`, or its text when it has none. A `cgroup` error
    /// names its own file: that becomes the path, the step within `step`.
    fn from_io(step: &'static str, e: std::io::Error) -> ChildError {
        if let Some(n) = e.raw_os_error() {
            return ChildError::new(step).with_errno(n);
        }
        let Some(wrapped) = e
            .get_ref()
            .and_then(|r| r.downcast_ref::<cgroup::WrappedIoError>())
        else {
            return ChildError::detail(step, e.to_string());
        };
        let (inner, path, source, value) = match wrapped {
            cgroup::WrappedIoError::Op { op, path, source } => (*op, path, source, None),
            cgroup::WrappedIoError::Write {
                path,
                value,
                source,
            } => ("write", path, source, Some(value)),
        };
        let mut out = ChildError::new(inner)
            .at(path.display().to_string())
            .within(step);
        out.errno = source.raw_os_error();
        if out.errno.is_none() {
            out.detail = Some(source.to_string());
        }
        if let Some(v) = value {
            out = out.and_said(&format!("writing {v:?}"));
        }
        out
    }

    /// The same, about `what`.
    pub fn at(mut self, what: impl Into<String>) -> ChildError {
        self.path = Some(what.into());
        self
    }

    /// The same, with the kernel's `errno`.
    pub fn with_errno(mut self, errno: i32) -> ChildError {
        self.errno = Some(errno);
        self
    }

    /// The same, as part of the larger step `outer` (`mount /proc`).
    pub fn within(mut self, outer: impl fmt::Display) -> ChildError {
        self.within = Some(match self.within.take() {
            Some(inner) => format!("{outer}: {inner}"),
            None => outer.to_string(),
        });
        self
    }

    /// The same, with `more` said after it (what a child wrote on stderr).
    pub fn and_said(mut self, more: &str) -> ChildError {
        if !more.is_empty() {
            self.detail = Some(match self.detail.take() {
                Some(d) => format!("{d}: {more}"),
                None => more.to_string(),
            });
        }
        self
    }

    /// The errno as an `io::Error` (its kind kept).
    pub fn io_error(&self) -> Option<std::io::Error> {
        self.errno.map(std::io::Error::from_raw_os_error)
    }

    /// As JSON for a pipe: at most [`WIRE_MAX`] bytes, the detail shortened
    /// when the whole would be longer.
    pub fn to_wire(&self) -> Vec<u8> {
        let mut e = self.clone();
        loop {
            let raw = serde_json::to_vec(&e).unwrap_or_default();
            if raw.len() as u64 <= WIRE_MAX || e.detail.as_ref().is_none_or(|d| d.is_empty()) {
                return raw;
            }
            if let Some(d) = e.detail.as_mut() {
                let over = raw.len() - usize::try_from(WIRE_MAX).unwrap_or(usize::MAX);
                let mut keep = d.len().saturating_sub(over + 8);
                while !d.is_char_boundary(keep) {
                    keep -= 1;
                }
                d.truncate(keep);
                d.push('…');
            }
        }
    }

    /// What a pipe carried: the JSON [`ChildError::to_wire`] writes, or
    /// (a peer from before this format) its text as the detail.
    pub fn from_wire(step: &'static str, raw: &[u8]) -> ChildError {
        serde_json::from_slice(raw).unwrap_or_else(|_| {
            ChildError::detail(step, String::from_utf8_lossy(raw).trim().to_string())
        })
    }
}

impl fmt::Display for ChildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(w) = &self.within {
            write!(f, "{w}: ")?;
        }
        f.write_str(&self.step)?;
        if let Some(p) = &self.path {
            write!(f, " {p}")?;
        }
        if let Some(e) = self.io_error() {
            write!(f, ": {e}")?;
        }
        if let Some(d) = &self.detail {
            write!(f, ": {d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ChildError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_json() {
        let e = ChildError::errno_at("mount", "/proc on /x")(nix::errno::Errno::EACCES)
            .within("prepare the rootfs");
        let raw = e.to_wire();
        assert_eq!(ChildError::from_wire("create container", &raw), e);
        let d = ChildError::invalid("process.args", "empty").and_said("init: said this");
        assert_eq!(
            serde_json::from_slice::<ChildError>(&d.to_wire()).ok(),
            Some(d)
        );
    }

    #[test]
    fn reads_as_a_message() {
        let e = ChildError::errno_at("mount", "/proc on /x")(nix::errno::Errno::EACCES);
        assert_eq!(
            e.to_string(),
            "mount /proc on /x: Permission denied (os error 13)"
        );
        assert_eq!(
            e.within("mount /proc").to_string(),
            "mount /proc: mount /proc on /x: Permission denied (os error 13)"
        );
        assert_eq!(
            ChildError::invalid("process.args", "empty").to_string(),
            "process.args: empty"
        );
        let io = ChildError::io("create", Path::new("/run/x"))(std::io::Error::other("odd"));
        assert_eq!(
            (io.errno, io.to_string().as_str()),
            (None, "create /run/x: odd")
        );
    }

    #[test]
    fn text_that_is_not_json_becomes_the_detail() {
        let e = ChildError::from_wire("the init said", b"mount /proc: EPERM\n");
        assert_eq!(e.errno, None);
        assert_eq!(e.detail.as_deref(), Some("mount /proc: EPERM"));
        assert_eq!(e.to_string(), "the init said: mount /proc: EPERM");
    }

    #[test]
    fn a_cgroup_error_gives_its_file_and_errno() {
        let wrapped = std::io::Error::from(cgroup::WrappedIoError::Op {
            op: "mkdir",
            path: "/sys/fs/cgroup/x".into(),
            source: std::io::Error::from_raw_os_error(libc::EACCES),
        });
        let e = ChildError::os("make the container's cgroup")(wrapped);
        assert_eq!(e.errno, Some(libc::EACCES));
        assert_eq!(
            e.to_string(),
            "make the container's cgroup: mkdir /sys/fs/cgroup/x: Permission denied (os error 13)"
        );
    }

    #[test]
    fn the_errno_keeps_its_kind_and_long_details_fit() {
        let e = ChildError::errno("open")(nix::errno::Errno::ENOENT);
        assert_eq!(
            e.io_error().map(|e| e.kind()),
            Some(std::io::ErrorKind::NotFound)
        );
        let long = ChildError::detail("exec", "é".repeat(5000));
        let raw = long.to_wire();
        assert!(raw.len() as u64 <= WIRE_MAX, "{}", raw.len());
        let back = ChildError::from_wire("x", &raw);
        assert_eq!(back.step, "exec");
        assert!(back.detail.is_some_and(|d| d.ends_with('…')));
    }
}
