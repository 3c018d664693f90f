//! Platforms (os/arch/variant) and which manifest of an index fits the host.

use std::fmt;

use oci_spec::image::Platform as OciPlatform;

/// The platform an image must be for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
    pub variant: Option<String>,
}

impl Platform {
    /// The platform this binary runs on, in OCI/GOARCH terms
    /// (x86_64 → amd64, aarch64 → arm64/v8).
    pub fn host() -> Self {
        Self::for_rust_arch(std::env::consts::ARCH)
    }

    /// Maps a Rust `target_arch` name to the OCI platform.
    pub fn for_rust_arch(arch: &str) -> Self {
        let (architecture, variant) = match arch {
            "x86_64" => ("amd64", None),
            "aarch64" => ("arm64", Some("v8")),
            "arm" => ("arm", Some("v7")),
            "x86" => ("386", None),
            "powerpc64" => ("ppc64le", None),
            "riscv64" => ("riscv64", None),
            other => (other, None),
        };
        Self {
            os: "linux".into(),
            architecture: architecture.into(),
            variant: variant.map(Into::into),
        }
    }

    /// Parses `os/arch[/variant]`.
    pub fn parse(s: &str) -> Option<Self> {
        let mut it = s.split('/');
        let os = it.next()?.to_string();
        let architecture = it.next()?.to_string();
        let variant = it.next().map(str::to_string);
        if it.next().is_some() || os.is_empty() || architecture.is_empty() {
            return None;
        }
        Some(Self {
            os,
            architecture,
            variant,
        })
    }

    /// How well `candidate` fits: `None` when it does not run here, higher is
    /// better. An exact variant beats a missing one; arm64 treats a missing
    /// variant as v8, as containerd does.
    pub fn score(&self, candidate: &OciPlatform) -> Option<u8> {
        if candidate.os().to_string() != self.os
            || candidate.architecture().to_string() != self.architecture
        {
            return None;
        }
        let theirs = candidate.variant().as_deref();
        match (self.variant.as_deref(), theirs) {
            (Some(a), Some(b)) if a == b => Some(2),
            (_, None) => Some(1),
            (None, Some(_)) => None,
            (Some(_), Some(_)) => None,
        }
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_spec::image::{Arch, Os, PlatformBuilder};

    fn oci(arch: Arch, variant: Option<&str>) -> OciPlatform {
        let mut b = PlatformBuilder::default().os(Os::Linux).architecture(arch);
        if let Some(v) = variant {
            b = b.variant(v.to_string());
        }
        b.build().expect("platform")
    }

    #[test]
    fn aarch64_is_arm64_v8() {
        let p = Platform::for_rust_arch("aarch64");
        assert_eq!(p.to_string(), "linux/arm64/v8");
        assert_eq!(p.score(&oci(Arch::ARM64, Some("v8"))), Some(2));
        assert_eq!(p.score(&oci(Arch::ARM64, None)), Some(1));
        assert_eq!(p.score(&oci(Arch::ARM64, Some("v9"))), None);
        assert_eq!(p.score(&oci(Arch::Amd64, None)), None);
    }

    #[test]
    fn amd64_rejects_variants_it_does_not_ask_for() {
        let p = Platform::for_rust_arch("x86_64");
        assert_eq!(p.score(&oci(Arch::Amd64, None)), Some(1));
        assert_eq!(p.score(&oci(Arch::ARM, Some("v7"))), None);
    }

    #[test]
    fn parse_round_trips() {
        assert_eq!(
            Platform::parse("linux/arm64/v8").expect("ok").to_string(),
            "linux/arm64/v8"
        );
        assert!(Platform::parse("linux").is_none());
    }
}
