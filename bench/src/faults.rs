//! `faults PICOLET WORKDIR KILLS [SEED]`: fault injection. Runs
//! `picolet up` on private paths under WORKDIR, churns static pods of four
//! kinds (an exec-probed sleeper, a host-network httpd with an httpGet
//! probe, a restartPolicy Never pod that exits with its own code, a pod
//! with an init container), and SIGKILLs the shim, the agent, a container
//! monitor (or the shim's spawner of monitors) or `up` itself at random
//! moments, KILLS times. After each kill
//! it waits for the node to settle and checks: one ready sandbox per
//! desired pod, of the desired version, with one running container (or the
//! expected exit code), nothing for removed manifests, no process in a
//! container cgroup that CRI does not list. At the end it removes every
//! manifest, stops `up` and counts what is left: processes, mounts,
//! cgroups, log directories, state records. Prints
//! `faults: N kills, V violations, L leaks` and exits 1 on any.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use cri_proto::v1::runtime_service_client::RuntimeServiceClient;
use cri_proto::v1::{
    ContainerState, ListContainersRequest, ListPodSandboxRequest, PodSandboxState,
};

const NODE: &str = "faults";
const CGROUP_ROOT: &str = "picolet-faults";
const SETTLE: Duration = Duration::from_secs(45);
const MAX_PODS: usize = 6;

/// xorshift64*: reproducible with the seed, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        let n = u64::try_from(n.max(1)).unwrap_or(u64::MAX);
        usize::try_from(self.next() % n).unwrap_or(0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Sleeper,
    Web,
    Once,
    Init,
}

#[derive(Debug, Clone)]
struct Desired {
    kind: Kind,
    version: u32,
    /// Web: the port; Once: the exit code.
    n: u32,
    /// Its monitor was killed: only the monitor can reap the container, so
    /// its exit code is unknown (255), as with conmon or a containerd shim.
    exit_lost: bool,
}

fn manifest(name: &str, d: &Desired) -> String {
    let head = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 2\n"
    );
    let env = format!("    env: [{{name: VERSION, value: \"{}\"}}]\n", d.version);
    let main = |cmd: &str| {
        format!(
            "  - name: main\n    image: busybox:latest\n    imagePullPolicy: IfNotPresent\n    command: [sh, -c, '{cmd}']\n{env}"
        )
    };
    match d.kind {
        Kind::Sleeper => format!(
            "{head}  containers:\n{}    readinessProbe: {{exec: {{command: [\"true\"]}}, periodSeconds: 1}}\n",
            main("exec sleep 100000")
        ),
        Kind::Web => format!(
            "{head}  hostNetwork: true\n  containers:\n{}    readinessProbe: {{httpGet: {{path: /, port: {}, host: 127.0.0.1}}, periodSeconds: 1}}\n",
            main(&format!(
                "mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p 127.0.0.1:{} -h /www",
                d.n
            )),
            d.n
        ),
        Kind::Once => format!(
            "{head}  restartPolicy: Never\n  containers:\n{}",
            main(&format!("sleep 1; exit {}", d.n))
        ),
        Kind::Init => format!(
            "{head}  initContainers:\n  - name: prep\n    image: busybox:latest\n    imagePullPolicy: IfNotPresent\n    command: [\"true\"]\n  containers:\n{}",
            main("exec sleep 100000")
        ),
    }
}

/// The harness's view of one run.
struct Run {
    picolet: PathBuf,
    dir: PathBuf,
    up: Option<Child>,
    port: u16,
}

impl Run {
    fn socket(&self) -> PathBuf {
        self.dir.join("run/picolet.sock")
    }
    fn manifests(&self) -> PathBuf {
        self.dir.join("manifests")
    }

    /// evictionHard names memory only: how full the host's disk is must
    /// not decide what the run does (disk pressure would remove images
    /// between a pod's removal and its return).
    fn write_config(&self) -> Result<()> {
        let d = self.dir.display();
        let text = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             staticPodPath: {d}/manifests\nfileCheckFrequency: 2s\nsyncFrequency: 10s\n\
             healthzPort: {}\nport: {}\nreadOnlyPort: {}\npodLogsDir: {d}/logs\ncgroupRoot: /{CGROUP_ROOT}\n\
             evictionHard: {{memory.available: 1Mi}}\n\
             picolet:\n  nodeName: {NODE}\n  nodeIP: 127.0.0.1\n  dataDir: {d}/root\n\
             \x20 runDir: {d}/run\n  criSocket: {d}/run/picolet.sock\n  imagesDir: {d}/images\n\
             \x20 cniConfDir: {d}/cni\n  defaultNetwork: false\n\
             \x20 restartBackoffInitial: 1s\n  restartBackoffMax: 4s\n",
            free_port()?,
            free_port()?,
            // /pods is read over the read-only port (plain HTTP).
            self.port
        );
        std::fs::write(self.dir.join("config.yaml"), text)?;
        Ok(())
    }

    fn start_up(&mut self) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("up.log"))?;
        let child = Command::new(&self.picolet)
            .arg("up")
            .arg("--config")
            .arg(self.dir.join("config.yaml"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("start picolet up")?;
        self.up = Some(child);
        Ok(())
    }

    /// (pid, command line) of up's children.
    fn children(&self) -> Vec<(u32, String)> {
        let Some(up) = &self.up else {
            return Vec::new();
        };
        let pid = up.id();
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .map(|p: u32| (p, cmdline(p)))
            .collect()
    }

    /// Container monitors of this run.
    fn monitors(&self) -> Vec<u32> {
        let mark = self.dir.to_string_lossy().into_owned();
        pids()
            .into_iter()
            .filter(|p| {
                let c = cmdline(*p);
                c.contains(" monitor ") && c.contains(&mark)
            })
            .collect()
    }
}

impl Run {
    /// The shim's monitor spawner (a child of one of the shim's threads).
    fn spawner(&self) -> Option<u32> {
        let (shim, _) = self
            .children()
            .into_iter()
            .find(|(_, c)| c.contains(" shim "))?;
        std::fs::read_dir(format!("/proc/{shim}/task"))
            .ok()?
            .flatten()
            .flat_map(|t| {
                std::fs::read_to_string(t.path().join("children"))
                    .unwrap_or_default()
                    .split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect::<Vec<u32>>()
            })
            .find(|p| cmdline(*p).contains(" monitor spawner "))
    }
}

fn pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

fn cmdline(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&raw).replace('\0', " ")
}

fn kill9(pid: u32) {
    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// GET `path` from the agent on 127.0.0.1:`port`: the body of a 200.
fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200")
        .then(|| body.to_string())
        .or_else(|| head.starts_with("HTTP/1.0 200").then(|| body.to_string()))
}

/// Where the pids controller keeps our cgroups (v1 hybrid or v2).
fn cgroup_base() -> PathBuf {
    let v1 = Path::new("/sys/fs/cgroup/pids").join(CGROUP_ROOT);
    if Path::new("/sys/fs/cgroup/pids").is_dir() {
        v1
    } else {
        Path::new("/sys/fs/cgroup").join(CGROUP_ROOT)
    }
}

/// Container cgroups (64-hex leaf names) that hold processes.
fn busy_container_cgroups() -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let mut stack = vec![cgroup_base()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if !p.is_dir() {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            if name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit()) {
                let procs = std::fs::read_to_string(p.join("cgroup.procs")).unwrap_or_default();
                if !procs.trim().is_empty() {
                    out.push((name, p.clone()));
                }
            }
            stack.push(p);
        }
    }
    out
}

/// What CRI says: per pod name, its sandboxes (uid, ready) and containers
/// (name, state, exit code).
#[derive(Debug, Default)]
struct Seen {
    sandboxes: BTreeMap<String, Vec<(String, String, bool)>>,
    containers: BTreeMap<String, Vec<(String, String, i32, String)>>,
    /// Running or created: the containers whose processes CRI accounts for.
    live_ids: HashSet<String>,
    /// Every listed container's state, by ID (for the violation message).
    states: HashMap<String, String>,
}

async fn observe(socket: &Path) -> Result<Seen> {
    let mut rt = RuntimeServiceClient::new(cri_proto::connect(socket).await?);
    let mut seen = Seen::default();
    for s in rt
        .list_pod_sandbox(ListPodSandboxRequest::default())
        .await?
        .into_inner()
        .items
    {
        let ready = s.state == PodSandboxState::SandboxReady as i32;
        let m = s.metadata.unwrap_or_default();
        seen.sandboxes
            .entry(m.name)
            .or_default()
            .push((s.id, m.uid, ready));
    }
    for c in rt
        .list_containers(ListContainersRequest::default())
        .await?
        .into_inner()
        .containers
    {
        let pod = c
            .labels
            .get("io.kubernetes.pod.name")
            .cloned()
            .unwrap_or_default();
        let name = c
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        let state = ContainerState::try_from(c.state)
            .map(|s| s.as_str_name().to_string())
            .unwrap_or_default();
        // A created container has its init waiting for a start: an agent
        // killed between CreateContainer and StartContainer leaves one, and
        // the next agent makes a new attempt; the old one is CRI's to see
        // and the container GC's to remove (each minute, as kubelet's).
        seen.states.insert(c.id.clone(), state.clone());
        if c.state == ContainerState::ContainerRunning as i32
            || c.state == ContainerState::ContainerCreated as i32
        {
            seen.live_ids.insert(c.id.clone());
        }
        let exit = if c.state == ContainerState::ContainerExited as i32 {
            let mut rt2 = rt.clone();
            rt2.container_status(cri_proto::v1::ContainerStatusRequest {
                container_id: c.id.clone(),
                verbose: false,
            })
            .await
            .ok()
            .and_then(|r| r.into_inner().status)
            .map(|s| s.exit_code)
            .unwrap_or(-1)
        } else {
            0
        };
        seen.containers
            .entry(pod)
            .or_default()
            .push((name, state, exit, c.pod_sandbox_id));
    }
    Ok(seen)
}

/// What is wrong now; empty when the node matches `desired`.
async fn check(
    run: &Run,
    desired: &BTreeMap<String, Desired>,
    gone: &HashSet<String>,
) -> Vec<String> {
    let mut bad = Vec::new();
    let seen = match observe(&run.socket()).await {
        Ok(s) => s,
        Err(e) => return vec![format!("CRI: {e:#}")],
    };
    let pods: Vec<serde_json::Value> = match http_get(run.port, "/pods")
        .and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok())
    {
        Some(v) => v["items"].as_array().cloned().unwrap_or_default(),
        None => return vec!["the agent's /pods does not answer".into()],
    };
    for (name, d) in desired {
        let full = format!("{name}-{NODE}");
        let Some(pod) = pods.iter().find(|p| p["metadata"]["name"] == full.as_str()) else {
            bad.push(format!("{full}: not in /pods"));
            continue;
        };
        let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
        let sandboxes = seen.sandboxes.get(&full).cloned().unwrap_or_default();
        // A finished restartPolicy Never pod keeps its sandbox stopped, as
        // kubelet: count every sandbox then; else the ready ones.
        let live: Vec<_> = sandboxes
            .iter()
            .filter(|s| s.2 || d.kind == Kind::Once)
            .collect();
        if live.len() != 1 || live[0].1 != uid {
            bad.push(format!(
                "{full} ({:?} v{}): sandboxes {sandboxes:?}, want one (ready unless finished) of uid {uid}",
                d.kind, d.version
            ));
            continue;
        }
        let sid = &live[0].0;
        let mains: Vec<_> = seen
            .containers
            .get(&full)
            .into_iter()
            .flatten()
            .filter(|c| c.0 == "main" && &c.3 == sid)
            .collect();
        match d.kind {
            Kind::Once => {
                if mains.len() != 1
                    || mains[0].1 != "CONTAINER_EXITED"
                    || (i64::from(mains[0].2) != i64::from(d.n) && !d.exit_lost)
                {
                    bad.push(format!(
                        "{full}: main {mains:?}, want one exited with {}",
                        d.n
                    ));
                }
            }
            _ => {
                let running = mains.iter().filter(|c| c.1 == "CONTAINER_RUNNING").count();
                if running != 1 {
                    bad.push(format!("{full}: main {mains:?}, want one running"));
                }
            }
        }
    }
    for name in gone {
        let full = format!("{name}-{NODE}");
        if let Some(s) = seen.sandboxes.get(&full)
            && !s.is_empty()
        {
            bad.push(format!("{full}: removed, still has sandboxes {s:?}"));
        }
    }
    for (id, path) in busy_container_cgroups() {
        if !seen.live_ids.contains(&id) {
            // What is there and what CRI says, for whoever reads the failure.
            let procs: Vec<String> = std::fs::read_to_string(path.join("cgroup.procs"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok())
                .map(|p| format!("{p}: {}", cmdline(p)))
                .collect();
            bad.push(format!(
                "processes in {} that CRI does not list as running or created (CRI: {}; processes: {procs:?})",
                path.display(),
                seen.states.get(&id).map_or("not listed", String::as_str),
            ));
        }
    }
    bad
}

/// Waits until `check` passes; the last failures when it never does.
async fn settle(
    run: &Run,
    desired: &BTreeMap<String, Desired>,
    gone: &HashSet<String>,
) -> Vec<String> {
    let deadline = Instant::now() + SETTLE;
    loop {
        let bad = check(run, desired, gone).await;
        if bad.is_empty() || Instant::now() > deadline {
            return bad;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn write_manifest(run: &Run, name: &str, d: &Desired) -> Result<()> {
    let tmp = run.manifests().join(format!(".{name}.tmp"));
    std::fs::write(&tmp, manifest(name, d))?;
    std::fs::rename(&tmp, run.manifests().join(format!("{name}.yaml")))?;
    Ok(())
}

/// What a finished run left behind.
fn leaks(run: &Run) -> Vec<String> {
    let mut out = Vec::new();
    let mark = run.dir.to_string_lossy().into_owned();
    for p in pids() {
        if p != std::process::id() && cmdline(p).contains(&mark) {
            out.push(format!("process {p}: {}", cmdline(p)));
        }
    }
    for l in std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
    {
        if l.contains(&mark) {
            out.push(format!("mount {l}"));
        }
    }
    for (_, p) in busy_container_cgroups() {
        out.push(format!("busy cgroup {}", p.display()));
    }
    for sub in [
        "logs",
        "root/shim/sandboxes",
        "root/shim/containers",
        "root/agent/pods",
    ] {
        for e in std::fs::read_dir(run.dir.join(sub))
            .into_iter()
            .flatten()
            .flatten()
        {
            out.push(format!("{sub}/{}", e.file_name().to_string_lossy()));
        }
    }
    out
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (picolet, dir, kills, seed) = match args.as_slice() {
        [p, d, k] => (p, d, k, None),
        [p, d, k, s] => (p, d, k, Some(s)),
        _ => bail!("usage: faults PICOLET WORKDIR KILLS [SEED]"),
    };
    let kills: u32 = kills.parse().context("KILLS")?;
    let seed: u64 = match seed {
        Some(s) => s.parse().context("SEED")?,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .subsec_nanos()
            .into(),
    };
    eprintln!("faults: seed {seed}");
    let mut rng = Rng(seed | 1);
    let mut run = Run {
        picolet: PathBuf::from(picolet),
        dir: PathBuf::from(dir),
        up: None,
        port: free_port()?,
    };
    std::fs::create_dir_all(run.manifests())?;
    std::fs::create_dir_all(run.dir.join("cni"))?;
    run.write_config()?;
    run.start_up()?;
    let mut desired: BTreeMap<String, Desired> = BTreeMap::new();
    let mut gone: HashSet<String> = HashSet::new();
    let mut next_id = 0u32;
    let mut violations = 0u32;
    let started = Instant::now();
    for round in 1..=kills {
        // Churn: add, replace or remove a pod.
        let action = rng.below(10);
        if desired.len() < 2 || (action < 5 && desired.len() < MAX_PODS) {
            next_id += 1;
            let kind = [Kind::Sleeper, Kind::Web, Kind::Once, Kind::Init][rng.below(4)];
            let n = match kind {
                Kind::Web => 21_000 + next_id,
                Kind::Once => 3 + next_id % 5,
                _ => 0,
            };
            let name = format!("p{next_id}");
            let d = Desired {
                kind,
                version: 1,
                n,
                exit_lost: false,
            };
            write_manifest(&run, &name, &d)?;
            gone.remove(&name);
            desired.insert(name, d);
        } else if action < 8 {
            let i = rng.below(desired.len());
            if let Some((name, d)) = desired.iter_mut().nth(i) {
                d.version += 1;
                d.exit_lost = false;
                let d = d.clone();
                write_manifest(&run, name, &d)?;
            }
        } else {
            let i = rng.below(desired.len());
            if let Some(name) = desired.keys().nth(i).cloned() {
                std::fs::remove_file(run.manifests().join(format!("{name}.yaml")))?;
                desired.remove(&name);
                gone.insert(name);
            }
        }
        // A moment for the churn to be under way, then a kill.
        tokio::time::sleep(Duration::from_millis(
            u64::try_from(rng.below(1500)).unwrap_or(0),
        ))
        .await;
        let target = rng.below(4);
        let what = match target {
            0 | 1 => {
                let role = if target == 0 { " shim " } else { " agent " };
                match run.children().into_iter().find(|(_, c)| c.contains(role)) {
                    Some((pid, _)) => {
                        kill9(pid);
                        role.trim().to_string()
                    }
                    None => format!("no{role}(restarting)"),
                }
            }
            2 => {
                // A container's monitor, or now and then the shim's spawner
                // of monitors (creates in flight fail; the next starts it).
                let spawner = if rng.below(4) == 0 {
                    run.spawner()
                } else {
                    None
                };
                let m = run.monitors();
                if let Some(pid) = spawner {
                    kill9(pid);
                    "the spawner".to_string()
                } else if m.is_empty() {
                    "no monitor".to_string()
                } else {
                    let pid = m[rng.below(m.len())];
                    // Its pod: the log path names it (`default_<name>-faults_<uid>`).
                    let line = cmdline(pid);
                    kill9(pid);
                    for (name, d) in desired.iter_mut() {
                        if line.contains(&format!("_{name}-{NODE}_")) {
                            d.exit_lost = true;
                        }
                    }
                    "a monitor".to_string()
                }
            }
            _ => {
                if let Some(mut up) = run.up.take() {
                    let _ = up.kill();
                    let _ = up.wait();
                }
                run.start_up()?;
                "up".to_string()
            }
        };
        let bad = settle(&run, &desired, &gone).await;
        if !bad.is_empty() {
            violations += 1;
            println!("round {round} (killed {what}): {}", bad.join("; "));
        } else {
            eprintln!(
                "round {round}: killed {what}; settled at {:?}",
                started.elapsed()
            );
        }
    }
    // Everything removed, then picolet stopped: what is left is a leak.
    for name in desired.keys() {
        let _ = std::fs::remove_file(run.manifests().join(format!("{name}.yaml")));
    }
    gone.extend(std::mem::take(&mut desired).into_keys());
    let bad = settle(&run, &desired, &gone).await;
    if !bad.is_empty() {
        violations += 1;
        println!("final: {}", bad.join("; "));
    }
    // The agent removes sandboxes, then the pod's logs: give it a moment.
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline && !leaks(&run).iter().all(|l| l.starts_with("process")) {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    if let Some(mut up) = run.up.take() {
        let _ = Command::new("kill")
            .args(["-TERM", &up.id().to_string()])
            .status();
        let _ = up.wait();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let left = leaks(&run);
    for l in &left {
        println!("leak: {l}");
    }
    println!(
        "faults: {kills} kills, {violations} violations, {} leaks ({:.0} s, seed {seed})",
        left.len(),
        started.elapsed().as_secs_f64()
    );
    if violations > 0 || !left.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}
