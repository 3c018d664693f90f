//! Host ports and masquerade of the built-in network through iptables, in
//! the nat table, in chains of picolet's own so that a pod's rules can be
//! found and removed by their comment: `PICOLET-HOSTPORTS` (jumped to from
//! PREROUTING and OUTPUT for local destinations) holds one DNAT rule per
//! port mapping, commented `picolet:<container id>`; `PICOLET-MASQ`
//! (from POSTROUTING) masquerades what leaves the pod subnet.
//!
//! iptables rather than nft: it is what Debian's reference plugins need
//! too, it is present on Debian and Ubuntu by default (as iptables-nft,
//! which writes nftables rules through the kernel's nf_tables), and
//! busybox-based images ship neither; `nft` is not installed by default.

use std::path::PathBuf;
use std::process::Command;

use super::PortMapping;

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

/// Rule specs (after `-A <chain>`) of one pod's port mappings.
pub fn hostport_rules(id: &str, pod_ip: &str, ports: &[PortMapping]) -> Vec<Vec<String>> {
    ports
        .iter()
        .map(|p| {
            let mut r: Vec<String> = Vec::new();
            if !p.host_ip.is_empty() && p.host_ip != "0.0.0.0" {
                r.extend(["-d".into(), format!("{}/32", p.host_ip)]);
            }
            let proto = p.protocol.to_ascii_lowercase();
            r.extend([
                "-p".into(),
                proto.clone(),
                "-m".into(),
                proto,
                "--dport".into(),
                p.host_port.to_string(),
                "-m".into(),
                "comment".into(),
                "--comment".into(),
                comment(id),
                "-j".into(),
                "DNAT".into(),
                "--to-destination".into(),
                format!("{pod_ip}:{}", p.container_port),
            ]);
            r
        })
        .collect()
}

/// `-D` specs of the rules `iptables -S <chain>` printed for container `id`.
/// iptables-nft quotes comments (`--comment "picolet:abc"`), legacy does
/// not; ours have no spaces, so words split on whitespace with their quotes
/// dropped are the arguments that made the rule.
pub fn rules_of(listing: &str, id: &str) -> Vec<Vec<String>> {
    let mark = comment(id);
    listing
        .lines()
        .filter(|l| l.starts_with("-A "))
        .map(|l| {
            let mut words: Vec<String> = l
                .split_whitespace()
                .map(|w| w.trim_matches('"').to_string())
                .collect();
            words[0] = "-D".into();
            words
        })
        .filter(|words| words.contains(&mark))
        .collect()
}

pub struct Iptables(PathBuf);

impl Iptables {
    pub fn new(bin: PathBuf) -> Self {
        Self(bin)
    }

    fn run(&self, args: &[String]) -> Result<String, String> {
        let out = Command::new(&self.0)
            .args(["-w", "5", "-t", "nat"])
            .args(args)
            .output()
            .map_err(|e| format!("run {}: {e}", self.0.display()))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "iptables -t nat {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    fn ensure_chain(&self, chain: &str) -> Result<(), String> {
        if self.run(&["-S".into(), chain.into()]).is_ok() {
            return Ok(());
        }
        self.run(&["-N".into(), chain.into()]).map(|_| ())
    }

    /// Appends `spec` to `chain` unless an identical rule is there.
    fn ensure_rule(&self, chain: &str, spec: &[&str]) -> Result<(), String> {
        let spec: Vec<String> = spec.iter().map(|s| s.to_string()).collect();
        let with = |op: &str| [vec![op.to_string(), chain.to_string()], spec.clone()].concat();
        if self.run(&with("-C")).is_ok() {
            return Ok(());
        }
        self.run(&with("-A")).map(|_| ())
    }

    /// Masquerade for traffic from `subnet` to anywhere outside it.
    pub fn ensure_masquerade(&self, subnet: &str) -> Result<(), String> {
        self.ensure_chain(MASQ)?;
        self.ensure_rule(MASQ, &["-s", subnet, "!", "-d", subnet, "-j", "MASQUERADE"])?;
        self.ensure_rule("POSTROUTING", &["-j", MASQ])
    }

    /// DNAT for `ports` of pod `id`, also from the host's 127.0.0.1 as
    /// portmap does: `route_localnet` on the bridge lets a DNATed packet
    /// from 127/8 leave through it, masqueraded to the bridge's address.
    pub fn add_hostports(
        &self,
        id: &str,
        pod_ip: &str,
        bridge: &str,
        ports: &[PortMapping],
    ) -> Result<(), String> {
        // A second ADD of the same pod replaces its rules.
        self.remove_hostports(id)?;
        if ports.is_empty() {
            return Ok(());
        }
        self.ensure_chain(HOSTPORTS)?;
        let jump = ["-m", "addrtype", "--dst-type", "LOCAL", "-j", HOSTPORTS];
        self.ensure_rule("PREROUTING", &jump)?;
        self.ensure_rule("OUTPUT", &jump)?;
        let localnet = format!("/proc/sys/net/ipv4/conf/{bridge}/route_localnet");
        std::fs::write(&localnet, "1").map_err(|e| format!("write {localnet}: {e}"))?;
        self.ensure_chain(MASQ)?;
        self.ensure_rule(
            MASQ,
            &["-s", "127.0.0.0/8", "-o", bridge, "-j", "MASQUERADE"],
        )?;
        self.ensure_rule("POSTROUTING", &["-j", MASQ])?;
        for spec in hostport_rules(id, pod_ip, ports) {
            self.run(&[vec!["-A".into(), HOSTPORTS.into()], spec].concat())?;
        }
        Ok(())
    }

    /// Removes every rule of container `id`; none is fine.
    pub fn remove_hostports(&self, id: &str) -> Result<(), String> {
        let Ok(listing) = self.run(&["-S".into(), HOSTPORTS.into()]) else {
            return Ok(());
        };
        for spec in rules_of(&listing, id) {
            self.run(&spec)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pods_rules_are_written_and_found_again_by_their_comment() {
        let ports = [
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
        ];
        let rules = hostport_rules("abc", "10.42.0.7", &ports);
        assert_eq!(
            rules[0].join(" "),
            "-p tcp -m tcp --dport 8080 -m comment --comment picolet:abc -j DNAT --to-destination 10.42.0.7:80"
        );
        assert_eq!(
            rules[1].join(" "),
            "-d 192.168.1.5/32 -p udp -m udp --dport 5353 -m comment --comment picolet:abc -j DNAT --to-destination 10.42.0.7:53"
        );
        // What iptables-nft 1.8.9 prints for them (quoted), for another
        // pod's, and what iptables-legacy prints (unquoted).
        let listing = "-N PICOLET-HOSTPORTS\n\
-A PICOLET-HOSTPORTS -p tcp -m tcp --dport 8080 -m comment --comment \"picolet:abc\" -j DNAT --to-destination 10.42.0.7:80\n\
-A PICOLET-HOSTPORTS -p tcp -m tcp --dport 8081 -m comment --comment picolet:abcd -j DNAT --to-destination 10.42.0.8:80\n\
-A PICOLET-HOSTPORTS -d 192.168.1.5/32 -p udp -m udp --dport 5353 -m comment --comment picolet:abc -j DNAT --to-destination 10.42.0.7:53\n";
        let del = rules_of(listing, "abc");
        assert_eq!(del.len(), 2, "{del:?}");
        assert_eq!(del[0][..2], ["-D", HOSTPORTS]);
        assert_eq!(del[0][2..], rules[0][..]);
        assert_eq!(del[1][2..], rules[1][..]);
        assert!(
            rules_of(listing, "ab").is_empty(),
            "a prefix of an id is not the id"
        );
    }
}
