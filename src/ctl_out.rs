//! ctl's standard output: lines written as errors, not panics, and the
//! end crictl (Go) has when the reader of its output goes away.

use std::process::ExitCode;

use anyhow::Result;

/// `println!` for ctl's output, as an error instead of a panic when stdout
/// fails: `println!` panics on EPIPE (Rust ignores SIGPIPE), and the release
/// build aborts on a panic, so `picolet ctl ps | grep -q x` printed
/// "Aborted" in the VM scenario whenever grep stopped reading first.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::ctl_out::write_line(format_args!($($arg)*))?
    };
}

/// The reader of ctl's stdout went away (`| head -1`, `| grep -q`).
#[derive(Debug)]
pub(crate) struct StdoutClosed;

impl std::fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stdout closed")
    }
}

impl std::error::Error for StdoutClosed {}

/// One line to stdout; see [`out!`].
pub(crate) fn write_line(args: std::fmt::Arguments<'_>) -> Result<()> {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    o.write_fmt(args)
        .and_then(|()| o.write_all(b"\n"))
        .map_err(stdout_error)
}

/// A failed write to stdout: [`StdoutClosed`] when the reader is gone.
pub(crate) fn stdout_error(e: std::io::Error) -> anyhow::Error {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        StdoutClosed.into()
    } else {
        anyhow::Error::new(e).context("writing to stdout")
    }
}

/// End as crictl (Go) does when its stdout's reader is gone: killed by
/// SIGPIPE, silently, status 128 + 13 in a shell.
pub(crate) fn die_of_sigpipe() -> ExitCode {
    use nix::sys::signal::{SigHandler, Signal, raise, signal};
    // SAFETY: SIG_DFL installs no handler; nothing else runs in this
    // process any more (the runtime is shut down).
    #[allow(unsafe_code)]
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
    let _ = raise(Signal::SIGPIPE);
    ExitCode::from(141)
}
