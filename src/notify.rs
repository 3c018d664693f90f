//! The service manager's side of `picolet up`: systemd's notify protocol
//! (`sd_notify(3)`: READY=1, STATUS=, WATCHDOG=1 as datagrams to
//! `$NOTIFY_SOCKET`) and `<runDir>/up.json`, the same readiness for any
//! other manager and for `picolet upgrade`.
//!
//! Written here rather than linked (libsystemd is C and dynamic; the static
//! binary runs where there is no systemd at all): the protocol is one
//! datagram of `KEY=value` lines to a unix socket, a path or, with a
//! leading `@`, an abstract name.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What `up` writes to `<runDir>/up.json` once the shim and the agent
/// serve: its pid, so that a reader can tell a new `up` from the one it
/// replaced, and the binary it runs.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct UpState {
    pub pid: u32,
    pub ready: bool,
    pub version: String,
}

pub(crate) const UP_STATE_FILE: &str = "up.json";

pub(crate) fn up_state_path(run_dir: &Path) -> PathBuf {
    run_dir.join(UP_STATE_FILE)
}

/// Reads `<runDir>/up.json`; none when missing or unreadable (a reader
/// polls until it is there).
pub(crate) fn read_up_state(run_dir: &Path) -> Option<UpState> {
    let bytes = std::fs::read(up_state_path(run_dir)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The service manager's variables: `up`'s children are started without
/// them (only the main process speaks for the service: `NotifyAccess=main`).
pub(crate) const MANAGER_VARS: [&str; 3] = ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"];

/// The service manager's notify socket and watchdog.
pub(crate) struct Notifier {
    socket: Option<(UnixDatagram, NotifyAddr)>,
    /// Half of `$WATCHDOG_USEC` when the watchdog is on for this pid.
    pub watchdog: Option<Duration>,
}

enum NotifyAddr {
    Path(PathBuf),
    Abstract(Vec<u8>),
}

impl Notifier {
    /// Reads `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID`; the
    /// children are started without them ([`MANAGER_VARS`]).
    pub fn from_env() -> Self {
        let socket = std::env::var_os("NOTIFY_SOCKET").and_then(|s| {
            let bytes = std::os::unix::ffi::OsStrExt::as_bytes(s.as_os_str()).to_vec();
            let addr = match bytes.strip_prefix(b"@") {
                Some(name) => NotifyAddr::Abstract(name.to_vec()),
                None if bytes.first() == Some(&b'/') => NotifyAddr::Path(PathBuf::from(s)),
                None => return None,
            };
            UnixDatagram::unbound().ok().map(|d| (d, addr))
        });
        let watchdog = watchdog_interval(
            std::env::var("WATCHDOG_USEC").ok().as_deref(),
            std::env::var("WATCHDOG_PID").ok().as_deref(),
            std::process::id(),
        );
        Self { socket, watchdog }
    }

    /// Sends one message (`READY=1\nSTATUS=…`); a manager that is not
    /// listening is not an error of ours.
    pub fn notify(&self, message: &str) {
        let Some((sock, addr)) = &self.socket else {
            return;
        };
        let sent = match addr {
            NotifyAddr::Path(p) => sock.send_to(message.as_bytes(), p),
            NotifyAddr::Abstract(name) => {
                use std::os::linux::net::SocketAddrExt;
                std::os::unix::net::SocketAddr::from_abstract_name(name)
                    .and_then(|a| sock.send_to_addr(message.as_bytes(), &a))
            }
        };
        if let Err(e) = sent {
            tracing::debug!("sd_notify {message:?}: {e}");
        }
    }
}

/// systemd's rule: the watchdog is ours when `WATCHDOG_PID` is unset or is
/// our pid; ping at half the timeout.
fn watchdog_interval(usec: Option<&str>, pid: Option<&str>, me: u32) -> Option<Duration> {
    let usec: u64 = usec?.parse().ok().filter(|u| *u > 0)?;
    if let Some(p) = pid
        && p.parse::<u32>().ok() != Some(me)
    {
        return None;
    }
    Some(Duration::from_micros(usec / 2))
}

/// `GET /healthz` of the agent on its healthz port: 200 with body `ok`.
pub(crate) async fn agent_healthy(addr: std::net::SocketAddr) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let probe = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(b"GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n")
            .await
            .ok()?;
        let mut buf = Vec::new();
        s.take(4096).read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf);
        Some(text.starts_with("HTTP/1.") && text.contains(" 200 ") && text.ends_with("ok"))
    };
    tokio::time::timeout(Duration::from_secs(2), probe)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_is_ours_only_for_our_pid() {
        assert_eq!(
            watchdog_interval(Some("60000000"), None, 7),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            watchdog_interval(Some("60000000"), Some("7"), 7),
            Some(Duration::from_secs(30))
        );
        assert_eq!(watchdog_interval(Some("60000000"), Some("8"), 7), None);
        assert_eq!(watchdog_interval(Some("0"), None, 7), None);
        assert_eq!(watchdog_interval(Some("x"), None, 7), None);
        assert_eq!(watchdog_interval(None, None, 7), None);
    }

    #[test]
    fn a_message_reaches_a_path_socket() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("notify");
        let server = UnixDatagram::bind(&path).expect("bind");
        let n = Notifier {
            socket: Some((
                UnixDatagram::unbound().expect("socket"),
                NotifyAddr::Path(path),
            )),
            watchdog: None,
        };
        n.notify("READY=1\nSTATUS=serving");
        let mut buf = [0u8; 64];
        let len = server.recv(&mut buf).expect("recv");
        assert_eq!(&buf[..len], b"READY=1\nSTATUS=serving");
    }

    #[test]
    fn a_message_reaches_an_abstract_socket() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("picolet-notify-test-{}", std::process::id());
        let addr =
            std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("addr");
        let server = UnixDatagram::bind_addr(&addr).expect("bind");
        let n = Notifier {
            socket: Some((
                UnixDatagram::unbound().expect("socket"),
                NotifyAddr::Abstract(name.into_bytes()),
            )),
            watchdog: None,
        };
        n.notify("WATCHDOG=1");
        let mut buf = [0u8; 64];
        let len = server.recv(&mut buf).expect("recv");
        assert_eq!(&buf[..len], b"WATCHDOG=1");
    }
}
