//! Host ports and masquerade of the built-in network through iptables, in
//! the nat table, in chains of picolet's own so that a pod's rules can be
//! found and removed by their comment: `PICOLET-HOSTPORTS` (jumped to from
//! PREROUTING and OUTPUT for local destinations) holds one DNAT rule per
//! port mapping, commented `picolet:<container id>`; `PICOLET-MASQ`
//! (from POSTROUTING) masquerades what leaves the pod subnet, and what a
//! DNAT from the host's 127.0.0.1 sends into the bridge.
//!
//! An ADD costs two runs: `iptables -t nat -S` (what is there), then one
//! `iptables-restore --noflush` with only what is missing ([`add_script`],
//! pure); a DEL lists the hostport chain and deletes the pod's rules in one
//! more run. (One run per rule, check first, cost ~25 ms of a 34 ms
//! RunPodSandbox in bench/cri.sh.)
//!
//! iptables rather than nft: it is what Debian's reference plugins need
//! too, it is present on Debian and Ubuntu by default (as iptables-nft,
//! which writes nftables rules through the kernel's nf_tables), and
//! busybox-based images ship neither; `nft` is not installed by default.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::PortMapping;

/// Why a run of iptables failed: the binary that could not run and the
/// I/O error, or what the tool said on stderr.
#[derive(Debug, thiserror::Error)]
pub enum IptablesError {
    #[error("run {}: {source}", bin.display())]
    Run {
        bin: PathBuf,
        source: std::io::Error,
    },
    #[error("iptables -t nat -S: {stderr}")]
    List { stderr: String },
    #[error("write to iptables-restore: {0}")]
    Feed(#[source] std::io::Error),
    #[error("iptables-restore: {0}")]
    Wait(#[source] std::io::Error),
    #[error("iptables-restore --noflush: {stderr} (input: {script:?})")]
    Restore { stderr: String, script: String },
}

pub const HOSTPORTS: &str = "PICOLET-HOSTPORTS";
pub const MASQ: &str = "PICOLET-MASQ";

/// The iptables binary, from PATH or the usual sbin folders.
pub fn find() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|d| d.join("iptables"))
        .find(|p| p.is_file())
}

/// The comment that marks the rules of container `id`.
pub fn comment(id: &str) -> String {
    format!("picolet:{id}")
}

/// Rule specs (after `-A <chain>`) of one pod's port mappings, in the form
/// `iptables -S` prints them back.
pub fn hostport_rules(id: &str, pod_ip: &str, ports: &[PortMapping]) -> Vec<String> {
    ports
        .iter()
        .map(|p| {
            let dest = if !p.host_ip.is_empty() && p.host_ip != "0.0.0.0" {
                format!("-d {}/32 ", p.host_ip)
            } else {
                String::new()
            };
            let proto = p.protocol.to_ascii_lowercase();
            format!(
                "{dest}-p {proto} -m {proto} --dport {} -m comment --comment {} -j DNAT --to-destination {pod_ip}:{}",
                p.host_port,
                comment(id),
                p.container_port
            )
        })
        .collect()
}

/// The `-A` lines of a listing, quotes dropped (iptables-nft quotes
/// comments, legacy does not; ours have no spaces).
fn rules(listing: &str) -> Vec<String> {
    listing
        .lines()
        .filter(|l| l.starts_with("-A "))
        .map(|l| {
            l.split_whitespace()
                .map(|w| w.trim_matches('"'))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// `-D` lines for the rules of container `id` in `listing`.
pub fn deletes_of(listing: &str, id: &str) -> Vec<String> {
    let mark = comment(id);
    rules(listing)
        .into_iter()
        .filter(|r| r.split(' ').any(|w| w == mark))
        .map(|r| format!("-D{}", &r[2..]))
        .collect()
}

/// What one ADD needs in the nat table.
pub struct Want<'a> {
    /// Masquerade traffic from this subnet to outside it.
    pub masquerade: Option<&'a str>,
    pub bridge: &'a str,
    pub id: &'a str,
    pub pod_ip: &'a str,
    pub ports: &'a [PortMapping],
}

/// The iptables-restore script (for `--noflush`) that turns the nat table
/// `listing` (`iptables -t nat -S`) into one with `want`: missing chains
/// and base rules, the pod's old rules deleted (a repeated ADD), its new
/// ones appended. `None`: nothing to do.
pub fn add_script(listing: &str, want: &Want) -> Option<String> {
    let have = rules(listing);
    let chains: Vec<&str> = listing
        .lines()
        .filter_map(|l| l.strip_prefix("-N "))
        .map(str::trim)
        .collect();
    let mut base: Vec<(&str, String)> = Vec::new();
    if let Some(s) = want.masquerade {
        base.push((MASQ, format!("-s {s} ! -d {s} -j MASQUERADE")));
    }
    if !want.ports.is_empty() {
        let jump = format!("-m addrtype --dst-type LOCAL -j {HOSTPORTS}");
        base.push(("PREROUTING", jump.clone()));
        base.push(("OUTPUT", jump));
        base.push((
            MASQ,
            format!("-s 127.0.0.0/8 -o {} -j MASQUERADE", want.bridge),
        ));
    }
    if !base.is_empty() {
        base.push(("POSTROUTING", format!("-j {MASQ}")));
    }
    let mut lines = Vec::new();
    for chain in [MASQ, HOSTPORTS] {
        let used = base.iter().any(|(c, r)| *c == chain || r.ends_with(chain));
        if used && !chains.contains(&chain) {
            lines.push(format!(":{chain} - [0:0]"));
        }
    }
    for (chain, rule) in &base {
        let line = format!("-A {chain} {rule}");
        if !have.contains(&line) {
            lines.push(line);
        }
    }
    lines.extend(deletes_of(listing, want.id));
    for rule in hostport_rules(want.id, want.pod_ip, want.ports) {
        lines.push(format!("-A {HOSTPORTS} {rule}"));
    }
    if lines.is_empty() {
        return None;
    }
    Some(format!("*nat\n{}\nCOMMIT\n", lines.join("\n")))
}

pub struct Iptables(PathBuf);

/// How long base rules seen in place are taken as still there.
pub const BASE_FRESH: std::time::Duration = std::time::Duration::from_secs(10);

/// The base rules this process last saw in place (masquerade and bridge),
/// and when.
static BASE_SEEN: std::sync::Mutex<Option<(String, std::time::Instant)>> =
    std::sync::Mutex::new(None);

fn base_seen(base: &str) -> bool {
    BASE_SEEN
        .lock()
        .ok()
        .and_then(|g| {
            g.as_ref()
                .map(|(b, at)| b == base && at.elapsed() < BASE_FRESH)
        })
        .unwrap_or(false)
}

fn see_base(base: String) {
    if let Ok(mut g) = BASE_SEEN.lock() {
        *g = Some((base, std::time::Instant::now()));
    }
}

impl Iptables {
    pub fn new(bin: PathBuf) -> Self {
        Self(bin)
    }

    fn list(&self, chain: Option<&str>) -> Result<String, IptablesError> {
        let mut cmd = Command::new(&self.0);
        cmd.args(["-w", "5", "-t", "nat", "-S"]).args(chain);
        let out = cmd.output().map_err(|source| IptablesError::Run {
            bin: self.0.clone(),
            source,
        })?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(IptablesError::List {
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            })
        }
    }

    /// Feeds `script` to `iptables-restore --noflush` beside the binary.
    fn restore(&self, script: &str) -> Result<(), IptablesError> {
        let bin = self
            .0
            .parent()
            .unwrap_or(Path::new("/"))
            .join("iptables-restore");
        let mut child = Command::new(&bin)
            .args(["-w", "5", "--noflush"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| IptablesError::Run { bin, source })?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(script.as_bytes())
                .map_err(IptablesError::Feed)?;
        }
        let out = child.wait_with_output().map_err(IptablesError::Wait)?;
        if out.status.success() {
            Ok(())
        } else {
            Err(IptablesError::Restore {
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
                script: script.to_string(),
            })
        }
    }

    /// Base chains and rules as needed, and the pod's hostport rules.
    ///
    /// A pod without port mappings needs only the base rules. Once this
    /// process has seen them in place, it takes them as there for
    /// [`BASE_FRESH`] (the shim runs the plugin in its own process: at a
    /// cold start of 100 pods the listing, an exec of iptables per pod,
    /// was ~2 ms of CPU each). A firewall reload that drops them is
    /// repaired by the first ADD after that.
    pub fn add(&self, want: &Want) -> Result<(), IptablesError> {
        let base = format!("{:?} {}", want.masquerade, want.bridge);
        if want.ports.is_empty() && base_seen(&base) {
            return Ok(());
        }
        let listing = self.list(None)?;
        if let Some(script) = add_script(&listing, want) {
            self.restore(&script)?;
        }
        see_base(base);
        Ok(())
    }

    /// Removes every rule of container `id`; none is fine.
    pub fn remove(&self, id: &str) -> Result<(), IptablesError> {
        let Ok(listing) = self.list(Some(HOSTPORTS)) else {
            return Ok(());
        };
        let deletes = deletes_of(&listing, id);
        if deletes.is_empty() {
            return Ok(());
        }
        self.restore(&format!("*nat\n{}\nCOMMIT\n", deletes.join("\n")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ports() -> Vec<PortMapping> {
        vec![
            PortMapping {
                host_port: 8080,
                container_port: 80,
                protocol: "TCP".into(),
                host_ip: String::new(),
            },
            PortMapping {
                host_port: 5353,
                container_port: 53,
                protocol: "UDP".into(),
                host_ip: "192.168.1.5".into(),
            },
        ]
    }

    #[test]
    fn a_pods_rules_are_written_and_found_again_by_their_comment() {
        let rules = hostport_rules("abc", "10.42.0.7", &ports());
        assert_eq!(
            rules[0],
            "-p tcp -m tcp --dport 8080 -m comment --comment picolet:abc -j DNAT --to-destination 10.42.0.7:80"
        );
        assert_eq!(
            rules[1],
            "-d 192.168.1.5/32 -p udp -m udp --dport 5353 -m comment --comment picolet:abc -j DNAT --to-destination 10.42.0.7:53"
        );
        // What iptables-nft 1.8.9 prints for them (quoted), for another
        // pod's, and what iptables-legacy prints (unquoted).
        let listing = "-N PICOLET-HOSTPORTS\n\
-A PICOLET-HOSTPORTS -p tcp -m tcp --dport 8080 -m comment --comment \"picolet:abc\" -j DNAT --to-destination 10.42.0.7:80\n\
-A PICOLET-HOSTPORTS -p tcp -m tcp --dport 8081 -m comment --comment picolet:abcd -j DNAT --to-destination 10.42.0.8:80\n\
-A PICOLET-HOSTPORTS -d 192.168.1.5/32 -p udp -m udp --dport 5353 -m comment --comment picolet:abc -j DNAT --to-destination 10.42.0.7:53\n";
        let del = deletes_of(listing, "abc");
        assert_eq!(
            del,
            [
                format!("-D {HOSTPORTS} {}", rules[0]),
                format!("-D {HOSTPORTS} {}", rules[1])
            ]
        );
        assert!(
            deletes_of(listing, "ab").is_empty(),
            "a prefix of an id is not the id"
        );
    }

    fn want<'a>(ports: &'a [PortMapping]) -> Want<'a> {
        Want {
            masquerade: Some("10.42.0.0/16"),
            bridge: "picolet0",
            id: "abc",
            pod_ip: "10.42.0.7",
            ports,
        }
    }

    #[test]
    fn the_first_add_makes_chains_and_base_rules_later_ones_only_their_own() {
        let p = ports();
        let first =
            add_script("-P PREROUTING ACCEPT\n-P OUTPUT ACCEPT\n", &want(&p)).expect("work");
        assert_eq!(
            first,
            format!(
                "*nat\n:PICOLET-MASQ - [0:0]\n:PICOLET-HOSTPORTS - [0:0]\n\
-A PICOLET-MASQ -s 10.42.0.0/16 ! -d 10.42.0.0/16 -j MASQUERADE\n\
-A PREROUTING -m addrtype --dst-type LOCAL -j PICOLET-HOSTPORTS\n\
-A OUTPUT -m addrtype --dst-type LOCAL -j PICOLET-HOSTPORTS\n\
-A PICOLET-MASQ -s 127.0.0.0/8 -o picolet0 -j MASQUERADE\n\
-A POSTROUTING -j PICOLET-MASQ\n\
-A PICOLET-HOSTPORTS {}\n-A PICOLET-HOSTPORTS {}\nCOMMIT\n",
                hostport_rules("abc", "10.42.0.7", &p)[0],
                hostport_rules("abc", "10.42.0.7", &p)[1]
            )
        );
        // The table as iptables-nft 1.8.9 lists it after that script ran.
        let listing = "-P PREROUTING ACCEPT\n-P INPUT ACCEPT\n-P OUTPUT ACCEPT\n-P POSTROUTING ACCEPT\n\
-N PICOLET-HOSTPORTS\n-N PICOLET-MASQ\n\
-A PREROUTING -m addrtype --dst-type LOCAL -j PICOLET-HOSTPORTS\n\
-A OUTPUT -m addrtype --dst-type LOCAL -j PICOLET-HOSTPORTS\n\
-A POSTROUTING -j PICOLET-MASQ\n\
-A PICOLET-HOSTPORTS -p tcp -m tcp --dport 8080 -m comment --comment \"picolet:abc\" -j DNAT --to-destination 10.42.0.7:80\n\
-A PICOLET-MASQ -s 10.42.0.0/16 ! -d 10.42.0.0/16 -j MASQUERADE\n\
-A PICOLET-MASQ -s 127.0.0.0/8 -o picolet0 -j MASQUERADE\n";
        let other = PortMapping {
            host_port: 9090,
            container_port: 90,
            protocol: "tcp".into(),
            host_ip: String::new(),
        };
        let next = Want {
            id: "def",
            pod_ip: "10.42.0.8",
            ..want(std::slice::from_ref(&other))
        };
        assert_eq!(
            add_script(listing, &next).expect("work"),
            format!(
                "*nat\n-A PICOLET-HOSTPORTS {}\nCOMMIT\n",
                hostport_rules("def", "10.42.0.8", &[other])[0]
            )
        );
        // ADD again for "abc": its old rule goes, its new ones come.
        let again = add_script(listing, &want(&p)).expect("work");
        assert!(
            again.starts_with("*nat\n-D PICOLET-HOSTPORTS -p tcp -m tcp --dport 8080"),
            "{again}"
        );
        // No ports, masquerade in place: nothing to run.
        assert_eq!(
            add_script(
                listing,
                &Want {
                    id: "x",
                    ..want(&[])
                }
            ),
            None
        );
    }
}
