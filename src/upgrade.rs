//! `picolet upgrade <new-binary>`: replace the installed binary with one
//! that has shown it works here, or put the old one back.
//!
//! 1. The new binary must run on this machine (`version` answers
//!    `picolet …`) and accept the current config and manifests (`check`).
//! 2. The pending upgrade is written down (`<dataDir>/upgrade.json`: both
//!    hashes, the binaries' paths, this process as the one watching), the
//!    new binary is staged beside the old one and fsynced, the old one is
//!    hard-linked to `<bin>.prev`, and the new one renamed over `<bin>`:
//!    at every instant `<bin>` is a whole binary, old or new.
//! 3. The service restarts and the upgrade waits for health: a new `up`
//!    (another pid, running the new file) reports the shim and agent
//!    serving, and every container that ran before runs still, with the
//!    same ID (none was restarted or replaced).
//! 4. Healthy: the record is removed and `<bin>.prev` kept. Not healthy
//!    by the deadline: `<bin>.prev` is renamed back over `<bin>`, the
//!    service restarted, and a rollback record left for `up` (its log) and
//!    the agent (a Warning event on the node).
//!
//! A power cut between 2 and 4 leaves the record with no one watching.
//! Before each start the service runs the kept binary's
//! `upgrade --boot-check`, which counts the new binary's starts; a new
//! `up` that becomes ready commits the upgrade, and after [`MAX_STARTS`]
//! starts that never did, the old binary is put back.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::service::{Manager, RunError, ServiceError};
use crate::{CommonArgs, load_config};

/// Starts a new binary gets after a power cut before the old one is put
/// back (with systemd's RestartSec=5s, about 15 s of trying).
pub(crate) const MAX_STARTS: u32 = 3;
const PENDING_FILE: &str = "upgrade.json";

#[derive(clap::Args)]
pub(crate) struct UpgradeArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// The new picolet binary.
    #[arg(required_unless_present = "boot_check")]
    new: Option<PathBuf>,
    /// The installed binary to replace [default: the one running this].
    #[arg(long)]
    bin: Option<PathBuf>,
    /// Seconds the new binary has to become healthy before the previous
    /// one is put back.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// The service manager [default: the one that booted the machine].
    #[arg(long, value_enum)]
    service: Option<Manager>,
    /// Run by the service before each start (see the module docs).
    #[arg(long, hide = true, conflicts_with = "new")]
    boot_check: bool,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum UpgradeError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not a picolet binary for this machine: {why}", path.display())]
    NotPicolet { path: PathBuf, why: String },
    #[error("{}: does not accept the current config and manifests:\n{output}", path.display())]
    CheckFailed { path: PathBuf, output: String },
    #[error("{} is already the installed binary", path.display())]
    Same { path: PathBuf },
    #[error("the installed binary {} was replaced while running; give it with --bin", path.display())]
    Deleted { path: PathBuf },
    #[error("list the running containers on {}: {source}", socket.display())]
    Cri {
        socket: PathBuf,
        source: CriCallError,
    },
    #[error(transparent)]
    Service(#[from] ServiceError),
    #[error("record {}: {why}", path.display())]
    Record { path: PathBuf, why: String },
}

/// A CRI call of `upgrade` or `reset` that did not work.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CriCallError {
    #[error("start an async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error(transparent)]
    Connect(#[from] cri_proto::SocketError),
    #[error("{what}: {message}")]
    Call { what: String, message: String },
    #[error("no answer in {0} s")]
    Timeout(u64),
}

/// Why the new binary is not healthy yet: what a check saw.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Unhealthy(String);

/// A single-threaded runtime for a few CRI calls from a command.
pub(crate) fn cri_runtime() -> Result<tokio::runtime::Runtime, CriCallError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(CriCallError::Runtime)
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> UpgradeError + '_ {
    move |source| UpgradeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The upgrade in progress, in `<dataDir>/upgrade.json`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Pending {
    bin: PathBuf,
    from_sha256: String,
    to_sha256: String,
    /// The `picolet upgrade` watching over it, in this boot.
    waiter: Option<Waiter>,
    /// Starts of the new binary counted by `--boot-check`.
    starts: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Waiter {
    pid: u32,
    boot_id: String,
}

impl Waiter {
    fn me() -> Self {
        Self {
            pid: std::process::id(),
            boot_id: boot_id(),
        }
    }

    /// Still there: same boot, and that pid is a `picolet upgrade`.
    fn alive(&self) -> bool {
        if self.boot_id != boot_id() {
            return false;
        }
        std::fs::read(format!("/proc/{}/cmdline", self.pid)).is_ok_and(|c| {
            c.split(|b| *b == 0)
                .nth(1)
                .is_some_and(|arg| arg == b"upgrade")
        })
    }
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn pending_path(data_dir: &Path) -> PathBuf {
    data_dir.join(PENDING_FILE)
}

fn read_pending(data_dir: &Path) -> Option<Pending> {
    let bytes = std::fs::read(pending_path(data_dir)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

fn write_pending(data_dir: &Path, p: &Pending) -> Result<(), UpgradeError> {
    let path = pending_path(data_dir);
    let bytes = serde_json::to_vec_pretty(p).map_err(|e| UpgradeError::Record {
        path: path.clone(),
        why: e.to_string(),
    })?;
    std::fs::create_dir_all(data_dir).map_err(io(data_dir))?;
    edge_config::write_atomic(&path, &bytes).map_err(io(&path))
}

fn remove_synced(path: &Path) -> Result<(), UpgradeError> {
    match std::fs::remove_file(path) {
        Ok(()) => sync_dir(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(path)(e)),
    }
}

pub(crate) fn sync_dir(path: &Path) -> Result<(), UpgradeError> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))
}

pub(crate) fn sha256_file(path: &Path) -> Result<String, UpgradeError> {
    use sha2::Digest;
    let mut f = std::fs::File::open(path).map_err(io(path))?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf).map_err(io(path))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

fn prev_of(bin: &Path) -> PathBuf {
    let mut s = bin.as_os_str().to_owned();
    s.push(".prev");
    PathBuf::from(s)
}

/// Runs `bin args…` with a deadline; (success, what it wrote).
fn run_captured(bin: &Path, args: &[String], limit: Duration) -> Result<(bool, String), RunError> {
    let mut cmd = std::process::Command::new(bin);
    cmd.args(args);
    crate::service::run_bounded(&mut cmd, limit).map(|r| (r.status.success(), r.output))
}

/// Step 1: the new binary runs here and accepts what the old one runs.
fn check_new(new: &Path, common: &CommonArgs) -> Result<(), UpgradeError> {
    let (ok, out) =
        run_captured(new, &["version".into()], Duration::from_secs(20)).map_err(|e| {
            UpgradeError::NotPicolet {
                path: new.into(),
                why: e.to_string(),
            }
        })?;
    if !ok || !out.starts_with("picolet ") {
        return Err(UpgradeError::NotPicolet {
            path: new.into(),
            why: format!("`version` answered {:?}", out.trim()),
        });
    }
    let mut args = vec!["check".to_string()];
    if let Some(c) = &common.config {
        args.extend(["--config".into(), c.display().to_string()]);
    }
    if let Some(r) = &common.root {
        args.extend(["--root".into(), r.display().to_string()]);
    }
    let (ok, output) = run_captured(new, &args, Duration::from_secs(60)).map_err(|e| {
        UpgradeError::CheckFailed {
            path: new.into(),
            output: e.to_string(),
        }
    })?;
    if !ok {
        return Err(UpgradeError::CheckFailed {
            path: new.into(),
            output,
        });
    }
    Ok(())
}

/// The IDs of the running containers.
fn running_containers(socket: &Path) -> Result<BTreeSet<String>, CriCallError> {
    use cri_proto::v1::runtime_service_client::RuntimeServiceClient;
    use cri_proto::v1::{ContainerFilter, ContainerState, ContainerStateValue};
    let rt = cri_runtime()?;
    rt.block_on(async {
        let list = async {
            let channel = cri_proto::connect(socket).await?;
            let filter = ContainerFilter {
                state: Some(ContainerStateValue {
                    state: ContainerState::ContainerRunning.into(),
                }),
                ..Default::default()
            };
            let reply = RuntimeServiceClient::new(channel)
                .list_containers(cri_proto::v1::ListContainersRequest {
                    filter: Some(filter),
                })
                .await
                .map_err(|s| CriCallError::Call {
                    what: "ListContainers".into(),
                    message: s.message().to_string(),
                })?;
            Ok(reply
                .into_inner()
                .containers
                .into_iter()
                .map(|c| c.id)
                .collect())
        };
        tokio::time::timeout(Duration::from_secs(10), list)
            .await
            .unwrap_or(Err(CriCallError::Timeout(10)))
    })
}

/// What health means after a restart: a new `up`, running `bin`, ready;
/// every container of before still running.
struct Before {
    up_pid: Option<u32>,
    containers: BTreeSet<String>,
    /// systemd's count of the service's automatic restarts, where systemd
    /// runs it: a new binary that keeps exiting fails early.
    restarts: Option<u64>,
}

/// Exits of the new binary that make waiting longer pointless.
const CRASHES: u64 = 2;

/// systemd's `NRestarts` of the service (automatic restarts only).
fn systemd_restarts(manager: Manager) -> Option<u64> {
    if manager != Manager::Systemd {
        return None;
    }
    let out = std::process::Command::new("systemctl")
        .args(["show", "-p", "NRestarts", "--value", "picolet.service"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// The reason health is not there yet, or None when it is.
fn unhealthy(bin: &Path, config: &edge_config::Config, before: &Before) -> Option<String> {
    let Some(state) = crate::notify::read_up_state(&config.run_dir) else {
        return Some("no `up` has reported ready".into());
    };
    if Some(state.pid) == before.up_pid || !state.ready {
        return Some("no new `up` has reported ready".into());
    }
    let exe = std::fs::read_link(format!("/proc/{}/exe", state.pid));
    if exe.as_deref().ok() != Some(bin) {
        return Some(format!(
            "`up` (pid {}) does not run {} (it runs {:?})",
            state.pid,
            bin.display(),
            exe.map(|p| p.display().to_string())
        ));
    }
    match running_containers(&config.cri_socket) {
        Err(e) => Some(format!("the shim does not answer: {e}")),
        Ok(now) => {
            let gone: Vec<_> = before.containers.difference(&now).collect();
            (!gone.is_empty()).then(|| {
                format!(
                    "{} of {} containers no longer run (first: {})",
                    gone.len(),
                    before.containers.len(),
                    gone[0]
                )
            })
        }
    }
}

fn wait_healthy(
    bin: &Path,
    config: &edge_config::Config,
    before: &Before,
    limit: Duration,
    manager: Manager,
) -> Result<(), Unhealthy> {
    let deadline = Instant::now() + limit;
    loop {
        let why = match unhealthy(bin, config, before) {
            None => return Ok(()),
            Some(why) => why,
        };
        if Instant::now() >= deadline {
            return Err(Unhealthy(format!(
                "not healthy in {} s: {why}",
                limit.as_secs()
            )));
        }
        if let (Some(n0), Some(n)) = (before.restarts, systemd_restarts(manager))
            && n >= n0 + CRASHES
        {
            return Err(Unhealthy(format!(
                "it exited {} times since the restart (systemd's NRestarts): {why}",
                n - n0
            )));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Puts `<bin>.prev` back over `<bin>` and leaves the rollback record.
fn roll_back(p: &Pending, data_dir: &Path, reason: String) -> Result<(), UpgradeError> {
    std::fs::rename(prev_of(&p.bin), &p.bin).map_err(io(&p.bin))?;
    sync_dir(&p.bin)?;
    let record = edge_config::upgrade::Rollback {
        failed_sha256: p.to_sha256.clone(),
        restored_sha256: p.from_sha256.clone(),
        reason,
    };
    let path = edge_config::upgrade::rollback_path(data_dir);
    let bytes = serde_json::to_vec_pretty(&record).map_err(|e| UpgradeError::Record {
        path: path.clone(),
        why: e.to_string(),
    })?;
    edge_config::write_atomic(&path, &bytes).map_err(io(&path))?;
    remove_synced(&pending_path(data_dir))
}

pub(crate) fn run(args: UpgradeArgs) -> ExitCode {
    let config = match load_config(&args.common) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if args.boot_check {
        return match boot_check(&config.data_dir, args.bin.as_deref()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("picolet upgrade --boot-check: {e}");
                ExitCode::FAILURE
            }
        };
    }
    match upgrade(&args, &config) {
        Ok(Done::Upgraded { from, to, kept }) => {
            println!(
                "picolet upgrade: sha256:{} → sha256:{}: healthy, {kept} containers kept running",
                &from[..12],
                &to[..12]
            );
            ExitCode::SUCCESS
        }
        Ok(Done::RolledBack(record)) => {
            eprintln!("picolet upgrade: {}", record.message());
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("picolet upgrade: {e}");
            ExitCode::from(2)
        }
    }
}

enum Done {
    Upgraded {
        from: String,
        to: String,
        kept: usize,
    },
    RolledBack(edge_config::upgrade::Rollback),
}

fn upgrade(args: &UpgradeArgs, config: &edge_config::Config) -> Result<Done, UpgradeError> {
    let new = args.new.as_deref().unwrap_or(Path::new(""));
    let new = std::fs::canonicalize(new).map_err(io(new))?;
    let bin = match &args.bin {
        Some(b) => std::fs::canonicalize(b).map_err(io(b))?,
        None => {
            let exe = std::env::current_exe().map_err(io(Path::new("/proc/self/exe")))?;
            if exe.to_string_lossy().ends_with(" (deleted)") {
                return Err(UpgradeError::Deleted { path: exe });
            }
            exe
        }
    };
    if new == bin {
        return Err(UpgradeError::Same { path: new });
    }
    check_new(&new, &args.common)?;
    let manager = args.service.unwrap_or_else(Manager::detect);
    let service_file = manager.file(Path::new("/"));
    let before = Before {
        up_pid: crate::notify::read_up_state(&config.run_dir).map(|s| s.pid),
        containers: running_containers(&config.cri_socket).map_err(|source| UpgradeError::Cri {
            socket: config.cri_socket.clone(),
            source,
        })?,
        restarts: systemd_restarts(manager),
    };
    let pending = Pending {
        from_sha256: sha256_file(&bin)?,
        to_sha256: sha256_file(&new)?,
        bin: bin.clone(),
        waiter: Some(Waiter::me()),
        starts: 0,
    };
    // Stage: the whole new binary on disk beside the old one first.
    let dir = bin.parent().unwrap_or(Path::new("/"));
    let staged = dir.join(format!(".picolet.{}.new", std::process::id()));
    stage_copy(&new, &staged)?;
    write_pending(&config.data_dir, &pending)?;
    // Keep the running binary as <bin>.prev (a second name for it), then
    // swap: rename is atomic, so <bin> is always one whole binary.
    let previous = prev_of(&bin);
    remove_synced(&previous)?;
    std::fs::hard_link(&bin, &previous).map_err(io(&previous))?;
    std::fs::rename(&staged, &bin).map_err(io(&bin))?;
    sync_dir(&bin)?;
    tracing::info!(
        "installed sha256:{} as {}; restarting the service",
        &pending.to_sha256[..12],
        bin.display()
    );
    let limit = Duration::from_secs(args.timeout);
    let health = manager
        .restart(&service_file)
        .map_err(|e| Unhealthy(e.to_string()))
        .and_then(|()| wait_healthy(&bin, config, &before, limit, manager));
    match health {
        Ok(()) => {
            remove_synced(&pending_path(&config.data_dir))?;
            Ok(Done::Upgraded {
                from: pending.from_sha256,
                to: pending.to_sha256,
                kept: before.containers.len(),
            })
        }
        Err(why) => {
            let reason = why.to_string();
            tracing::warn!("{reason}; putting the previous binary back");
            roll_back(&pending, &config.data_dir, reason.clone())?;
            let restarted_before = Before {
                up_pid: crate::notify::read_up_state(&config.run_dir).map(|s| s.pid),
                containers: before.containers.clone(),
                restarts: systemd_restarts(manager),
            };
            manager.restart(&service_file)?;
            if let Err(e) = wait_healthy(&bin, config, &restarted_before, limit, manager) {
                tracing::warn!("the previous binary is back but not healthy yet: {e}");
            }
            Ok(Done::RolledBack(edge_config::upgrade::Rollback {
                failed_sha256: pending.to_sha256,
                restored_sha256: pending.from_sha256,
                reason,
            }))
        }
    }
}

/// Copies `from` to `to` (0755), fsynced.
pub(crate) fn stage_copy(from: &Path, to: &Path) -> Result<(), UpgradeError> {
    use std::os::unix::fs::OpenOptionsExt;
    let copied = (|| {
        let mut src = std::fs::File::open(from)?;
        let mut dst = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o755)
            .open(to)?;
        std::io::copy(&mut src, &mut dst)?;
        dst.sync_all()
    })();
    if copied.is_err() {
        let _ = std::fs::remove_file(to);
    }
    copied.map_err(io(to))
}

/// Before each start of the service, run by `<bin>.prev`: counts the starts
/// of a new binary no upgrade watches over, and after [`MAX_STARTS`]
/// without a commit puts the previous one back.
fn boot_check(data_dir: &Path, bin: Option<&Path>) -> Result<(), UpgradeError> {
    let Some(mut p) = read_pending(data_dir) else {
        return Ok(());
    };
    if bin.is_some_and(|b| b != p.bin) {
        return Ok(());
    }
    if p.waiter.as_ref().is_some_and(Waiter::alive) {
        return Ok(());
    }
    // The swap never happened, or a rollback finished it: nothing pending.
    if sha256_file(&p.bin)? != p.to_sha256 || !prev_of(&p.bin).exists() {
        return remove_synced(&pending_path(data_dir));
    }
    if p.starts >= MAX_STARTS {
        let reason = format!(
            "{} starts after an interrupted upgrade without becoming ready",
            p.starts
        );
        eprintln!("picolet: {reason}: putting the previous binary back");
        return roll_back(&p, data_dir, reason);
    }
    p.starts += 1;
    p.waiter = None;
    write_pending(data_dir, &p)
}

/// Called by a new `up` once ready: an upgrade no one watches over (a power
/// cut ended its `picolet upgrade`) is done.
pub(crate) fn commit_if_unwatched(data_dir: &Path) {
    let Some(p) = read_pending(data_dir) else {
        return;
    };
    if p.waiter.as_ref().is_some_and(Waiter::alive) {
        return;
    }
    let running = std::env::current_exe().ok();
    if running.as_deref() != Some(p.bin.as_path())
        || sha256_file(&p.bin).ok().as_deref() != Some(p.to_sha256.as_str())
    {
        return;
    }
    match remove_synced(&pending_path(data_dir)) {
        Ok(()) => tracing::info!(
            "upgrade to sha256:{} committed after {} starts",
            p.to_sha256.get(..12).unwrap_or(""),
            p.starts
        ),
        Err(e) => tracing::warn!("commit the upgrade: {e}"),
    }
}

/// At `up`'s start: a rollback record goes to the service's log. The agent
/// turns it into an event and removes it.
pub(crate) fn report_rollback(data_dir: &Path) {
    match edge_config::upgrade::read_rollback(data_dir) {
        Some(Ok(r)) => tracing::warn!("{}", r.message()),
        Some(Err(e)) => tracing::warn!("unreadable upgrade record: {e}"),
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(dir: &Path, starts: u32) -> Pending {
        let bin = dir.join("picolet");
        std::fs::write(&bin, b"new").expect("write");
        std::fs::write(prev_of(&bin), b"old").expect("write");
        Pending {
            from_sha256: sha256_file(&prev_of(&bin)).expect("sha"),
            to_sha256: sha256_file(&bin).expect("sha"),
            bin,
            waiter: None,
            starts,
        }
    }

    #[test]
    fn a_new_binary_that_never_gets_ready_is_put_back_after_its_starts() {
        let d = tempfile::tempdir().expect("tempdir");
        let p = pending(d.path(), 0);
        write_pending(d.path(), &p).expect("write");
        for n in 1..=MAX_STARTS {
            boot_check(d.path(), Some(&p.bin)).expect("check");
            assert_eq!(read_pending(d.path()).expect("pending").starts, n);
            assert_eq!(std::fs::read(&p.bin).expect("bin"), b"new");
        }
        boot_check(d.path(), Some(&p.bin)).expect("check");
        assert_eq!(std::fs::read(&p.bin).expect("bin"), b"old");
        assert!(!prev_of(&p.bin).exists());
        assert!(read_pending(d.path()).is_none());
        let r = edge_config::upgrade::read_rollback(d.path())
            .expect("record")
            .expect("parses");
        assert_eq!(r.failed_sha256, p.to_sha256);
        assert!(r.reason.contains("3 starts"), "{}", r.reason);
    }

    #[test]
    fn a_waiter_of_another_boot_does_not_hold_the_rollback() {
        let d = tempfile::tempdir().expect("tempdir");
        // A power cut ended the upgrade: its pid may be another process
        // now, so a waiter of another boot never counts.
        let mut p = pending(d.path(), MAX_STARTS);
        p.waiter = Some(Waiter {
            pid: std::process::id(),
            boot_id: "another boot".into(),
        });
        write_pending(d.path(), &p).expect("write");
        boot_check(d.path(), Some(&p.bin)).expect("check");
        assert_eq!(
            std::fs::read(&p.bin).expect("bin"),
            b"old",
            "a dead waiter does not hold the rollback"
        );
    }

    #[test]
    fn a_swap_that_never_happened_leaves_nothing_pending() {
        let d = tempfile::tempdir().expect("tempdir");
        let mut p = pending(d.path(), 0);
        p.to_sha256 = "0".repeat(64);
        write_pending(d.path(), &p).expect("write");
        boot_check(d.path(), Some(&p.bin)).expect("check");
        assert!(read_pending(d.path()).is_none());
        assert_eq!(std::fs::read(&p.bin).expect("bin"), b"new");
    }

    #[test]
    fn another_binarys_record_is_not_touched() {
        let d = tempfile::tempdir().expect("tempdir");
        let p = pending(d.path(), MAX_STARTS);
        write_pending(d.path(), &p).expect("write");
        boot_check(d.path(), Some(Path::new("/usr/bin/other"))).expect("check");
        assert_eq!(read_pending(d.path()), Some(p));
    }

    #[test]
    fn a_binary_that_is_not_picolet_is_refused_before_anything_changes() {
        let d = tempfile::tempdir().expect("tempdir");
        let fake = d.path().join("fake");
        std::fs::write(&fake, "#!/bin/sh\necho hello\n").expect("write");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let e = check_new(&fake, &CommonArgs::default()).expect_err("refused");
        assert!(e.to_string().contains("not a picolet binary"), "{e}");
    }
}
