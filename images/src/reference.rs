//! Image references, normalised as containerd and crictl do:
//! `busybox` → `docker.io/library/busybox:latest`,
//! `localhost:5000/x` → `localhost:5000/x:latest`, digests kept.

use std::fmt;

use crate::{Digest, Error};

const DEFAULT_DOMAIN: &str = "docker.io";
const DEFAULT_TAG: &str = "latest";

/// A fully qualified image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// Registry host (with port), e.g. `docker.io`, `localhost:5000`.
    pub domain: String,
    /// Repository path, e.g. `library/busybox`.
    pub path: String,
    pub tag: Option<String>,
    pub digest: Option<Digest>,
}

impl Reference {
    /// Parses and normalises a reference. Fails with the reference in the
    /// message when it is not a valid docker reference.
    pub fn parse(input: &str) -> Result<Self, Error> {
        let bad = |why: &str| Error::BadReference {
            reference: input.to_string(),
            why: why.to_string(),
        };
        if input.is_empty() || input.len() > 255 + 128 + 72 {
            return Err(bad("empty or too long"));
        }
        let (rest, digest) = match input.split_once('@') {
            Some((r, d)) => (
                r,
                Some(Digest::parse(d).map_err(|_| bad("invalid digest"))?),
            ),
            None => (input, None),
        };
        // A tag is a ':' after the last '/'.
        let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match rest[last_slash..].rfind(':') {
            Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
            None => (rest, None),
        };
        if let Some(tag) = tag
            && !valid_tag(tag)
        {
            return Err(bad("invalid tag"));
        }
        let (domain, path) = match name.split_once('/') {
            Some((first, rest))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (first.to_string(), rest.to_string())
            }
            _ => (DEFAULT_DOMAIN.to_string(), name.to_string()),
        };
        let domain = if domain == "index.docker.io" {
            DEFAULT_DOMAIN.to_string()
        } else {
            domain
        };
        if !valid_domain(&domain) {
            return Err(bad("invalid registry host"));
        }
        if path.is_empty() || !path.split('/').all(valid_component) {
            return Err(bad(
                "repository must be lowercase letters, digits and separators (. _ __ -)",
            ));
        }
        let path = if domain == DEFAULT_DOMAIN && !path.contains('/') {
            format!("library/{path}")
        } else {
            path
        };
        let tag = match (tag, &digest) {
            (Some(t), _) => Some(t.to_string()),
            (None, None) => Some(DEFAULT_TAG.to_string()),
            (None, Some(_)) => None,
        };
        Ok(Self {
            domain,
            path,
            tag,
            digest,
        })
    }

    /// `domain/path`, e.g. `docker.io/library/busybox`.
    pub fn name(&self) -> String {
        format!("{}/{}", self.domain, self.path)
    }

    /// `domain/path@digest` for a given manifest digest.
    pub fn with_digest(&self, digest: &Digest) -> String {
        format!("{}@{}", self.name(), digest)
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name())?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

fn valid_tag(t: &str) -> bool {
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"_.-".contains(c))
}

fn valid_domain(d: &str) -> bool {
    let (host, port) = match d.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (d, None),
    };
    let host_ok = !host.is_empty()
        && host
            .split('.')
            .all(|l| !l.is_empty() && l.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-'));
    let port_ok = port.is_none_or(|p| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()));
    host_ok && port_ok
}

/// `[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*`
fn valid_component(c: &str) -> bool {
    let b = c.as_bytes();
    if b.is_empty() || !is_alnum(b[0]) || !is_alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if is_alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !is_alnum(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        let ok = sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|x| x == b'-');
        if !ok {
            return false;
        }
    }
    true
}

fn is_alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(s: &str) -> String {
        Reference::parse(s).expect(s).to_string()
    }

    #[test]
    fn normalises_like_containerd() {
        let d = format!("sha256:{}", "ab".repeat(32));
        let cases = [
            ("busybox", "docker.io/library/busybox:latest".to_string()),
            ("busybox:1.36", "docker.io/library/busybox:1.36".to_string()),
            (
                "library/busybox",
                "docker.io/library/busybox:latest".to_string(),
            ),
            ("user/app:v1", "docker.io/user/app:v1".to_string()),
            (
                "index.docker.io/user/app",
                "docker.io/user/app:latest".to_string(),
            ),
            ("localhost/x", "localhost/x:latest".to_string()),
            ("localhost:5000/x", "localhost:5000/x:latest".to_string()),
            ("localhost:5000/a/b:c", "localhost:5000/a/b:c".to_string()),
            (
                "quay.io/a/b-c__d.e",
                "quay.io/a/b-c__d.e:latest".to_string(),
            ),
            ("127.0.0.1:5000/x", "127.0.0.1:5000/x:latest".to_string()),
            (
                &format!("busybox@{d}") as &str,
                format!("docker.io/library/busybox@{d}"),
            ),
            (
                &format!("busybox:1@{d}") as &str,
                format!("docker.io/library/busybox:1@{d}"),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(norm(input), want, "input {input}");
        }
    }

    #[test]
    fn rejects_invalid() {
        for bad in [
            "",
            "Busybox",
            "busybox:",
            "busybox:-x",
            "a//b",
            "a/-b",
            "busybox@sha256:abc",
            "host:port:5000/x",
            "x:y/z",
            "a__-b",
        ] {
            assert!(Reference::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn digest_form_uses_the_name() {
        let r = Reference::parse("busybox:1").expect("valid");
        let d = Digest::of(b"x");
        assert_eq!(r.with_digest(&d), format!("docker.io/library/busybox@{d}"));
    }
}
