//! Device access rules on cgroup v2.
//!
//! v2 has no `devices` controller: the kernel asks a `BPF_PROG_TYPE_CGROUP_DEVICE`
//! program attached to the cgroup on every open and mknod of a device node.
//! libcontainer only builds that program with its `cgroupsv2_devices` feature,
//! which links libbpf (C, plus libelf and zlib) — not something that builds
//! static for both musl targets — and without it device rules are silently
//! dropped. So picolet does it itself, in Rust: [`Policy`] folds the OCI
//! rules the way the v1 kernel would ([`Policy::apply`]), [`program`] turns
//! the result into a few eBPF instructions, and [`attach`] loads and attaches
//! them with two `bpf(2)` calls.

mod bpf;
mod program;

use std::fmt;
use std::io;
use std::path::Path;

pub use program::{Insn, program};

use crate::WrappedIoError;

/// Block or character device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Block,
    Char,
}

/// A set of `m` (mknod), `r`, `w` — the kernel's `BPF_DEVCG_ACC_*` bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Access(u8);

impl Access {
    pub const MKNOD: Access = Access(1);
    pub const READ: Access = Access(2);
    pub const WRITE: Access = Access(4);
    pub const ALL: Access = Access(7);

    pub fn bits(self) -> u8 {
        self.0
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    pub fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
    pub fn intersects(self, other: Access) -> bool {
        self.0 & other.0 != 0
    }
    fn union(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }
    fn without(self, other: Access) -> Access {
        Access(self.0 & !other.0)
    }
}

/// An access string with a letter outside `rwm`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("access {given:?}: want letters of \"rwm\"")]
pub struct AccessError {
    pub given: String,
}

impl std::str::FromStr for Access {
    type Err = AccessError;

    /// `"rwm"`, in any order; empty is the empty set.
    fn from_str(s: &str) -> Result<Self, AccessError> {
        let mut a = Access::default();
        for c in s.chars() {
            a = a.union(match c {
                'r' => Access::READ,
                'w' => Access::WRITE,
                'm' => Access::MKNOD,
                _ => return Err(AccessError { given: s.into() }),
            });
        }
        Ok(a)
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (bit, c) in [
            (Access::READ, 'r'),
            (Access::WRITE, 'w'),
            (Access::MKNOD, 'm'),
        ] {
            if self.contains(bit) {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

/// One OCI `linux.resources.devices` entry. `kind: None` is type `a`: like
/// writing `a` to v1's `devices.allow`/`devices.deny`, it resets everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub allow: bool,
    pub kind: Option<Kind>,
    /// `None` is `*`.
    pub major: Option<u32>,
    pub minor: Option<u32>,
    pub access: Access,
}

/// One entry of the exception list: the devices the default does not apply to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exception {
    pub kind: Kind,
    pub major: Option<u32>,
    pub minor: Option<u32>,
    pub access: Access,
}

impl Exception {
    fn matches(&self, kind: Kind, major: u32, minor: u32) -> bool {
        self.kind == kind
            && self.major.is_none_or(|m| m == major)
            && self.minor.is_none_or(|m| m == minor)
    }
}

/// The v1 devices controller's state: a default and a list of exceptions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub default_allow: bool,
    pub exceptions: Vec<Exception>,
}

impl Default for Policy {
    /// Deny everything (as runc starts on v2) until a rule says otherwise.
    fn default() -> Self {
        Policy {
            default_allow: false,
            exceptions: Vec::new(),
        }
    }
}

impl Policy {
    /// Folds `rules` in order into a policy that starts denying everything.
    pub fn from_rules<'a>(rules: impl IntoIterator<Item = &'a Rule>) -> Self {
        let mut p = Policy::default();
        for r in rules {
            p.apply(r);
        }
        p
    }

    /// One rule, with the v1 kernel's semantics (`devcgroup_update_access`):
    /// type `a` resets the default and clears the exceptions; a rule that
    /// agrees with the default takes its access out of the exception with
    /// the same type/major/minor; one that disagrees adds an exception (or
    /// widens the one with the same type/major/minor).
    pub fn apply(&mut self, rule: &Rule) {
        let Some(kind) = rule.kind else {
            self.default_allow = rule.allow;
            self.exceptions.clear();
            return;
        };
        if rule.access.is_empty() {
            return;
        }
        let same = |e: &Exception| e.kind == kind && e.major == rule.major && e.minor == rule.minor;
        if rule.allow == self.default_allow {
            for e in self.exceptions.iter_mut().filter(|e| same(e)) {
                e.access = e.access.without(rule.access);
            }
            self.exceptions.retain(|e| !e.access.is_empty());
        } else if let Some(e) = self.exceptions.iter_mut().find(|e| same(e)) {
            e.access = e.access.union(rule.access);
        } else {
            self.exceptions.push(Exception {
                kind,
                major: rule.major,
                minor: rule.minor,
                access: rule.access,
            });
        }
    }

    /// Whether an open/mknod is allowed (`__devcgroup_check_permission`):
    /// with default deny an exception must grant all of the access asked
    /// for; with default allow any exception that names part of it denies.
    pub fn allows(&self, kind: Kind, major: u32, minor: u32, access: Access) -> bool {
        let hit = |e: &&Exception| e.matches(kind, major, minor);
        if self.default_allow {
            !self
                .exceptions
                .iter()
                .filter(hit)
                .any(|e| e.access.intersects(access))
        } else {
            self.exceptions
                .iter()
                .filter(hit)
                .any(|e| e.access.contains(access))
        }
    }
}

/// What the runtime allows on top of the spec's rules, in this order, after
/// them — the same list libcontainer appends on cgroup v1 (and runc's
/// `AllowedDevices`), so a container sees the same devices on v1 and v2:
/// mknod of any node; null, zero, full, tty, urandom, random; console, ptmx,
/// the pts; /dev/net/tun.
pub fn runtime_defaults() -> Vec<Rule> {
    let c = |major, minor, access| Rule {
        allow: true,
        kind: Some(Kind::Char),
        major,
        minor,
        access,
    };
    vec![
        c(Some(1), Some(3), Access::ALL),
        c(Some(1), Some(5), Access::ALL),
        c(Some(1), Some(7), Access::ALL),
        c(Some(5), Some(0), Access::ALL),
        c(Some(1), Some(9), Access::ALL),
        c(Some(1), Some(8), Access::ALL),
        c(None, None, Access::MKNOD),
        Rule {
            kind: Some(Kind::Block),
            ..c(None, None, Access::MKNOD)
        },
        c(Some(5), Some(1), Access::ALL),
        c(Some(136), None, Access::ALL),
        c(Some(5), Some(2), Access::ALL),
        c(Some(10), Some(200), Access::ALL),
    ]
}

/// Loads `policy` as a device program and attaches it to the cgroup
/// directory `cgroup` (cgroup v2), alongside whatever is attached already
/// (`BPF_F_ALLOW_MULTI`: a device must pass every program on its path).
/// The attachment lives as long as the cgroup; nothing to detach.
pub fn attach(cgroup: &Path, policy: &Policy) -> io::Result<()> {
    let insns = program(policy);
    let prog = bpf::load_device_program(&insns)?;
    let dir = std::fs::File::open(cgroup).map_err(WrappedIoError::op("open", cgroup))?;
    bpf::attach_device_program(&dir, &prog).map_err(WrappedIoError::op("attach to", cgroup))
}

#[cfg(test)]
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss,
    reason = "a BPF interpreter: the casts are the instruction set's register semantics"
)]
mod tests;
