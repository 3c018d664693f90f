//! Waiting for a container's process to exit: its pidfd (Linux 5.3+)
//! becomes readable when it does, on tokio's reactor.
#![allow(unsafe_code)]

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use crate::host::pidfd::open;

/// Calls `exited` when process `pid` — the one that started at
/// `start_time` (clock ticks), not a later user of the pid — exits, and
/// `watching` before that, once its pidfd is open and the process is the
/// recorded one. Without pidfds (old kernels) it returns at once, calling
/// neither, and the caller's polling stays the only way to notice.
pub async fn notify_on_exit(
    pid: i32,
    start_time: Option<u64>,
    watching: impl FnOnce(),
    exited: impl FnOnce(),
) {
    let fd = match open(pid) {
        Ok(fd) => fd,
        Err(e) => {
            if e.raw_os_error() == Some(libc::ESRCH) {
                exited();
            }
            return;
        }
    };
    // Checked after opening: the pidfd now pins this process.
    if start_time.is_none() || crate::host::proc_start_time(pid) != start_time {
        exited();
        return;
    }
    // SAFETY: the AsyncFd takes ownership of the OwnedFd, which stays open
    // and is the same descriptor until the AsyncFd is dropped.
    let Ok(fd) = (unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }) else {
        return;
    };
    watching();
    let _ = fd.readable().await;
    exited();
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn wakes_when_the_process_exits_and_not_before() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.3")
            .spawn()
            .expect("sleep");
        let pid = i32::try_from(child.id()).expect("pid");
        let start = crate::host::proc_start_time(pid);
        let notify = Arc::new(tokio::sync::Notify::new());
        let t0 = std::time::Instant::now();
        let n = notify.clone();
        tokio::spawn(notify_on_exit(pid, start, || {}, move || n.notify_one()));
        tokio::time::timeout(Duration::from_secs(10), notify.notified())
            .await
            .expect("woken");
        assert!(
            t0.elapsed() >= Duration::from_millis(250),
            "woken early: {:?}",
            t0.elapsed()
        );
        let _ = child.wait();
        // A pid whose start time is not the recorded one: woken at once.
        let other = Arc::new(tokio::sync::Notify::new());
        let me = i32::try_from(std::process::id()).expect("pid");
        let o = other.clone();
        tokio::spawn(notify_on_exit(me, Some(1), || {}, move || o.notify_one()));
        tokio::time::timeout(Duration::from_secs(5), other.notified())
            .await
            .expect("a reused pid counts as exited");
    }
}
