//! Host-local-style address leases for the built-in network: one file per
//! leased address under `<dataDir>/<network>/`, named by the address and
//! holding `<container id>\n<ifname>\n`, made by hard-linking a complete
//! temporary file into place (a crash never leaves a half-written lease,
//! and two claims of one address cannot both win). `last_reserved_ip`
//! makes allocation round-robin, as host-local's, so a freed address is
//! not handed out again at once. Beside each lease, a symlink named
//! `<container id>:<ifname>` points at its address, so finding an owner's
//! lease is one `readlink`, not a read of every lease (host-local's way:
//! at a cold start of 100 pods those reads were the shim's largest user of
//! CPU in the ADD). A lease without one (made before the index, or a crash
//! between the link and the symlink) is still found by a scan when it is
//! released or checked. [`Leases::allocate`] and
//! [`Leases::release`] take the network's lock for their own reads and
//! links only, as host-local does: the links, addresses and rules of an
//! ADD are the pod's own and need no lock (the runtime never runs two
//! calls for one container at once, CNI spec). Under one lock for a whole
//! ADD, with a device flush inside, a cold start of 100 pods set up their
//! networks one at a time.

use std::fs;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

/// Why a subnet does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubnetError {
    #[error("{0:?} is not a.b.c.d/prefix")]
    NoPrefix(String),
    #[error("{subnet:?}: {ip:?} is not an IPv4 address")]
    BadAddress { subnet: String, ip: String },
    #[error("{0:?}: prefix must be 8..30")]
    BadPrefix(String),
    #[error("{subnet:?}: host bits set (the network is {network})")]
    HostBits { subnet: String, network: Ipv4Addr },
}

/// Why a lease could not be taken or freed: the file and the I/O error
/// (its kind included) stay apart.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("lock {}: {source}", path.display())]
    Lock { path: PathBuf, source: nix::Error },
    #[error("lease {ip} in {}: {source}", dir.display())]
    Claim {
        ip: Ipv4Addr,
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("no free address left in {subnet} ({size} leased under {})", dir.display())]
    Exhausted {
        subnet: Subnet,
        size: u32,
        dir: PathBuf,
    },
    /// Writing or removing a lease's file, the rotation hint or the index.
    #[error(transparent)]
    File(#[from] images::Error),
}

/// `.map_err(io("create", &dir))`.
pub(super) fn io(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> LeaseError {
    let path = path.to_path_buf();
    move |source| LeaseError::Io { op, path, source }
}

/// An IPv4 subnet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subnet {
    pub network: Ipv4Addr,
    pub prefix: u8,
}

impl Subnet {
    /// `a.b.c.d/n`; the address must be the network's own (host bits zero).
    pub fn parse(s: &str) -> Result<Self, SubnetError> {
        let (ip, prefix) = s
            .split_once('/')
            .ok_or_else(|| SubnetError::NoPrefix(s.into()))?;
        let ip: Ipv4Addr = ip.parse().map_err(|_| SubnetError::BadAddress {
            subnet: s.into(),
            ip: ip.into(),
        })?;
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|p| (8..=30).contains(p))
            .ok_or_else(|| SubnetError::BadPrefix(s.into()))?;
        let net = Self {
            network: ip,
            prefix,
        };
        if u32::from(ip) & !net.mask() != 0 {
            return Err(SubnetError::HostBits {
                subnet: s.into(),
                network: net.base(),
            });
        }
        Ok(net)
    }

    fn mask(&self) -> u32 {
        u32::MAX << (32 - u32::from(self.prefix))
    }

    fn base(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.network) & self.mask())
    }

    /// The first host address: the bridge's (the pods' gateway).
    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.network) + 1)
    }

    /// Addresses pods may get: after the gateway, before broadcast.
    fn pod_range(&self) -> (u32, u32) {
        let first = u32::from(self.network) + 2;
        let last = (u32::from(self.network) | !self.mask()) - 1;
        (first, last)
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & self.mask() == u32::from(self.network)
    }
}

impl std::fmt::Display for Subnet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// The leases of one network.
pub struct Leases {
    dir: PathBuf,
    subnet: Subnet,
}

/// Held while it lives: no other allocation or release of the network's
/// addresses runs.
struct Locked(#[allow(dead_code)] Flock<fs::File>);

impl Leases {
    pub fn new(data_dir: &Path, network: &str, subnet: Subnet) -> Self {
        Self {
            dir: data_dir.join(network),
            subnet,
        }
    }

    fn lock(&self) -> Result<Locked, LeaseError> {
        fs::create_dir_all(&self.dir).map_err(io("create", &self.dir))?;
        let path = self.dir.join("lock");
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io("open", &path))?;
        Flock::lock(file, FlockArg::LockExclusive)
            .map(Locked)
            .map_err(|(_, source)| LeaseError::Lock { path, source })
    }

    fn owner(id: &str, ifname: &str) -> String {
        format!("{id}\n{ifname}\n")
    }

    /// Leased addresses and their owner text.
    fn leases(&self) -> Vec<(Ipv4Addr, PathBuf)> {
        let Ok(rd) = fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        rd.flatten()
            .filter_map(|e| {
                let ip = e.file_name().to_str()?.parse::<Ipv4Addr>().ok()?;
                Some((ip, e.path()))
            })
            .collect()
    }

    /// The index entry of `id`/`ifname`; none for names a file name
    /// cannot carry unambiguously (CNI ids have no `/` or `:`, Linux
    /// interface names neither).
    fn index(&self, id: &str, ifname: &str) -> Option<PathBuf> {
        let plain = |s: &str| !s.is_empty() && !s.starts_with('.') && !s.contains(['/', ':']);
        (plain(id) && plain(ifname)).then(|| self.dir.join(format!("{id}:{ifname}")))
    }

    /// The address the index says `id`/`ifname` holds, if its lease says so
    /// too (an index a crash left behind may point at a lease since given
    /// to another).
    fn indexed(&self, id: &str, ifname: &str) -> Option<Ipv4Addr> {
        let ip: Ipv4Addr = fs::read_link(self.index(id, ifname)?)
            .ok()?
            .to_str()?
            .parse()
            .ok()?;
        let held = fs::read_to_string(self.dir.join(ip.to_string()))
            .is_ok_and(|s| s == Self::owner(id, ifname));
        held.then_some(ip)
    }

    /// The address `id`/`ifname` holds, if any: by its index, else by a
    /// read of every lease.
    pub fn find(&self, id: &str, ifname: &str) -> Option<Ipv4Addr> {
        self.indexed(id, ifname).or_else(|| self.scan(id, ifname))
    }

    fn scan(&self, id: &str, ifname: &str) -> Option<Ipv4Addr> {
        let want = Self::owner(id, ifname);
        self.leases()
            .into_iter()
            .find(|(_, p)| fs::read_to_string(p).is_ok_and(|s| s == want))
            .map(|(ip, _)| ip)
    }

    /// The address of `id`/`ifname`: the one it holds, or the next free one
    /// after the last handed out. The lease is written and flushed before
    /// the lock is taken; under it, only the lease files are read and one
    /// is linked in.
    pub fn allocate(&self, id: &str, ifname: &str) -> Result<Ipv4Addr, LeaseError> {
        fs::create_dir_all(&self.dir).map_err(io("create", &self.dir))?;
        // `.lease-<pid>-<random>`: the pid tells a stale one.
        let tmp = self.dir.join(images::fsutil::unique_name(".lease"));
        write_synced(&tmp, Self::owner(id, ifname).as_bytes()).map_err(io("write", &tmp))?;
        let claimed = self.lock().and_then(|_lock| self.claim(id, ifname, &tmp));
        let _ = fs::remove_file(&tmp);
        claimed
    }

    fn claim(&self, id: &str, ifname: &str, tmp: &Path) -> Result<Ipv4Addr, LeaseError> {
        // By the index only: an ADD is for a new sandbox id, whose lease, if
        // a retried ADD made one, was indexed (a crash between its link
        // and its index failed that ADD, and its DEL scans).
        if let Some(ip) = self.indexed(id, ifname) {
            return Ok(ip);
        }
        let (first, last) = self.subnet.pod_range();
        let last_file = self.dir.join("last_reserved_ip.0");
        let after = fs::read_to_string(&last_file)
            .ok()
            .and_then(|s| s.trim().parse::<Ipv4Addr>().ok())
            .map(u32::from)
            .filter(|ip| (first..=last).contains(ip))
            .unwrap_or(last);
        remove_stale_temps_once(&self.dir);
        let size = last - first + 1;
        let mut claimed = None;
        for step in 1..=size {
            let ip = Ipv4Addr::from(first + (after - first + step) % size);
            match fs::hard_link(tmp, self.dir.join(ip.to_string())) {
                Ok(()) => {
                    claimed = Some(ip);
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(source) => {
                    return Err(LeaseError::Claim {
                        ip,
                        dir: self.dir.clone(),
                        source,
                    });
                }
            }
        }
        let ip = claimed.ok_or_else(|| LeaseError::Exhausted {
            subnet: self.subnet,
            size,
            dir: self.dir.clone(),
        })?;
        if let Some(index) = self.index(id, ifname) {
            // One left by a crash in a release points elsewhere.
            let _ = fs::remove_file(&index);
            std::os::unix::fs::symlink(ip.to_string(), &index).map_err(io("index", &index))?;
        }
        // Only a hint where the next search starts (host-local's rotation):
        // not worth a device flush per pod; a cut may lose it.
        images::fsutil::write_atomic_volatile(&last_file, ip.to_string().as_bytes())?;
        Ok(ip)
    }

    /// Frees what `id`/`ifname` holds; nothing held is fine.
    pub fn release(&self, id: &str, ifname: &str) -> Result<(), LeaseError> {
        let _lock = self.lock()?;
        let remove = images::fsutil::remove_file_if_exists;
        let index = self.index(id, ifname);
        match self.indexed(id, ifname) {
            Some(ip) => remove(&self.dir.join(ip.to_string()))?,
            None => {
                let want = Self::owner(id, ifname);
                for (_, path) in self.leases() {
                    if fs::read_to_string(&path).is_ok_and(|s| s == want) {
                        remove(&path)?;
                    }
                }
            }
        }
        // The lease first: a crash between leaves an index to nothing,
        // which `indexed` ignores and the next claim replaces.
        if let Some(index) = index {
            remove(&index)?;
        }
        Ok(())
    }
}

/// [`remove_stale_temps`] at a process's first claim in `dir`: a temporary
/// lease is only left by a process killed mid-claim, which a later one
/// clears (the shim's next start, or the next exec of the plugin). On
/// every claim it was a read of the whole folder, two entries per pod.
fn remove_stale_temps_once(dir: &Path) {
    static CLEANED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    let mut cleaned = CLEANED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !cleaned.iter().any(|d| d == dir) {
        remove_stale_temps(dir);
        cleaned.push(dir.to_path_buf());
    }
}

/// Temporary leases that a killed plugin process left: those of a process
/// that is gone (this one's may be another thread's, still in flight).
fn remove_stale_temps(dir: &Path) {
    let me = std::process::id().to_string();
    for e in fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(".lease-"))
            .map(|rest| rest.split('-').next().unwrap_or(rest))
        else {
            continue;
        };
        if pid != me && !Path::new("/proc").join(pid).exists() {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// `bytes` as `path`, flushed, by a rename from `<path>.tmp`.
pub(super) fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leases(dir: &Path, subnet: &str) -> Leases {
        Leases::new(dir, "net", Subnet::parse(subnet).expect("subnet"))
    }

    #[test]
    fn subnets_are_checked_and_know_their_gateway() {
        let s = Subnet::parse("10.42.0.0/16").expect("ok");
        assert_eq!(s.gateway(), Ipv4Addr::new(10, 42, 0, 1));
        assert_eq!(
            s.pod_range(),
            (
                u32::from(Ipv4Addr::new(10, 42, 0, 2)),
                u32::from(Ipv4Addr::new(10, 42, 255, 254))
            )
        );
        assert!(s.contains(Ipv4Addr::new(10, 42, 9, 9)));
        assert!(!s.contains(Ipv4Addr::new(10, 43, 0, 1)));
        for (bad, why) in [
            ("10.42.0.0", "a.b.c.d/prefix"),
            ("10.42.0.1/16", "host bits set (the network is 10.42.0.0)"),
            ("10.42.0.0/31", "prefix must be 8..30"),
            ("ten/8", "not an IPv4 address"),
        ] {
            let e = Subnet::parse(bad).expect_err(bad).to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn addresses_are_leased_round_robin_kept_per_owner_and_freed() {
        let dir = tempfile::tempdir().expect("tmp");
        let l = leases(dir.path(), "10.9.0.0/29"); // .2 ..= .6
        let a = l.allocate("a", "eth0").expect("a");
        assert_eq!(a, Ipv4Addr::new(10, 9, 0, 2));
        assert_eq!(
            l.allocate("a", "eth0").expect("again"),
            a,
            "same owner, same address"
        );
        let b = l.allocate("b", "eth0").expect("b");
        assert_eq!(b, Ipv4Addr::new(10, 9, 0, 3));
        l.release("a", "eth0").expect("release");
        assert_eq!(l.find("a", "eth0"), None);
        // Round robin: the freed .2 comes back only after the others.
        let got: Vec<_> = ["c", "d", "e", "f"]
            .iter()
            .map(|id| l.allocate(id, "eth0").expect(id).octets()[3])
            .collect();
        assert_eq!(got, [4, 5, 6, 2]);
        let full = l.allocate("g", "eth0").expect_err("full");
        assert!(
            matches!(full, LeaseError::Exhausted { size: 5, .. }),
            "{full:?}"
        );
        assert!(
            full.to_string()
                .contains("no free address left in 10.9.0.0/29"),
            "{full}"
        );
        l.release("nobody", "eth0")
            .expect("releasing nothing is fine");
        // A plugin killed between writing its lease and linking it in:
        // this process's first claim in the folder clears it.
        let fresh = tempfile::tempdir().expect("tmp");
        fs::create_dir_all(fresh.path().join("net")).expect("mkdir");
        fs::write(fresh.path().join("net/.lease-999999-1"), "x\neth0\n").expect("stale");
        leases(fresh.path(), "10.9.0.0/29")
            .allocate("h", "eth0")
            .expect("h");
        let names: Vec<_> = fs::read_dir(fresh.path().join("net"))
            .expect("dir")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.') || n.ends_with(".tmp"))
            .collect();
        assert!(names.is_empty(), "temporary files left: {names:?}");
    }

    #[test]
    fn leases_are_found_by_their_index_and_unindexed_ones_by_a_scan() {
        let dir = tempfile::tempdir().expect("tmp");
        let net = dir.path().join("net");
        let l = leases(dir.path(), "10.7.0.0/29"); // .2 ..= .6
        let a = l.allocate("a", "eth0").expect("a");
        assert_eq!(
            fs::read_link(net.join("a:eth0")).expect("index"),
            PathBuf::from(a.to_string())
        );
        assert_eq!(l.find("a", "eth0"), Some(a));
        // A lease made before the index (or whose index a crash lost):
        // found and released by a scan.
        fs::write(net.join("10.7.0.6"), "old\neth0\n").expect("old lease");
        assert_eq!(l.find("old", "eth0"), Some(Ipv4Addr::new(10, 7, 0, 6)));
        l.release("old", "eth0").expect("release old");
        assert!(!net.join("10.7.0.6").exists());
        // An index a crashed release left, pointing at a lease since given
        // to another: not the owner's, and its release keeps the other's.
        std::os::unix::fs::symlink(a.to_string(), net.join("gone:eth0")).expect("stale");
        assert_eq!(l.find("gone", "eth0"), None);
        l.release("gone", "eth0").expect("release gone");
        assert_eq!(l.find("a", "eth0"), Some(a), "a's lease kept");
        assert!(!net.join("gone:eth0").exists(), "stale index removed");
        // A claim replaces a stale index of its own name.
        std::os::unix::fs::symlink("10.7.0.5", net.join("b:eth0")).expect("stale b");
        let b = l.allocate("b", "eth0").expect("b");
        assert_eq!(l.find("b", "eth0"), Some(b));
        // Names a file name cannot carry get no index, and still a lease.
        let odd = l.allocate("x:y", "eth0").expect("odd");
        assert_eq!(l.find("x:y", "eth0"), Some(odd));
        for (id, _) in [("a", a), ("b", b), ("x:y", odd)] {
            l.release(id, "eth0").expect("release");
        }
        let left: Vec<_> = fs::read_dir(&net)
            .expect("dir")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != "lock" && !n.starts_with("last_reserved_ip"))
            .collect();
        assert!(left.is_empty(), "left: {left:?}");
    }

    #[test]
    fn concurrent_allocations_get_distinct_addresses_and_leave_no_temporary_files() {
        let dir = tempfile::tempdir().expect("tmp");
        let got: Vec<Ipv4Addr> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..16)
                .map(|i| {
                    let d = dir.path();
                    s.spawn(move || {
                        leases(d, "10.8.0.0/24")
                            .allocate(&format!("pod{i}"), "eth0")
                            .expect("allocate")
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().expect("thread")).collect()
        });
        let mut unique = got.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), 16, "{got:?}");
        let temps: Vec<_> = fs::read_dir(dir.path().join("net"))
            .expect("dir")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".lease-"))
            .collect();
        assert!(temps.is_empty(), "{temps:?}");
    }
}
