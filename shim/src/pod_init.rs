//! `picolet monitor pod-init`: the tiny init of a pod's shared pid namespace
//! (pid mode POD), started only for pods that ask for one. A pid namespace
//! dies with its init, so something must be pid 1 for as long as the pod
//! lives; this is that process: it reaps orphans and exits on SIGTERM.
//! (Other pod namespaces need no process: they are pinned by bind mounts.)

use std::io::Write;

use nix::sched::{CloneFlags, unshare};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, fork};

/// Runs in a fresh, single-threaded `picolet` process. Prints the pid (as
/// seen from the caller's namespace) of the new namespace's init, then exits;
/// the init lives on. Returns the exit code.
#[allow(unsafe_code)]
pub fn run() -> i32 {
    if let Err(e) = unshare(CloneFlags::CLONE_NEWPID) {
        eprintln!("pod-init: unshare pid namespace: {e}");
        return 1;
    }
    // SAFETY: this process is single-threaded (no runtime or threads were
    // started before this point), so the child may run arbitrary code.
    match unsafe { fork() } {
        Ok(ForkResult::Parent { child }) => {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", child.as_raw());
            let _ = out.flush();
            0
        }
        Ok(ForkResult::Child) => {
            serve_as_init();
            0
        }
        Err(e) => {
            eprintln!("pod-init: fork: {e}");
            1
        }
    }
}

/// Pid 1 of the pod: reap children, exit on SIGTERM or SIGINT.
fn serve_as_init() {
    // Let go of the caller's pipes: it waits for their EOF.
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        use std::os::fd::AsRawFd;
        for fd in 0..=2 {
            let _ = nix::unistd::dup2(null.as_raw_fd(), fd);
        }
    }
    let _ = nix::unistd::setsid();
    let _ = nix::unistd::chdir("/");
    let mut mask = SigSet::empty();
    for s in [
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
    ] {
        mask.add(s);
    }
    if mask.thread_block().is_err() {
        return;
    }
    loop {
        match mask.wait() {
            Ok(Signal::SIGCHLD) => loop {
                match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::StillAlive) | Err(_) => break,
                    Ok(_) => {}
                }
            },
            Ok(Signal::SIGHUP) => {}
            _ => return,
        }
    }
}
