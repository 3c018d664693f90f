//! Content digests (`sha256:<64 hex>`) and a reader that hashes what passes.

use std::fmt;
use std::io::{self, Read};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::Error;

/// A validated `sha256:<hex>` digest. Other algorithms are rejected: every
/// image tool in use writes sha256.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Digest(String);

impl Digest {
    /// Parses `sha256:<64 lowercase hex>`.
    pub fn parse(s: &str) -> Result<Self, Error> {
        let hex = s
            .strip_prefix("sha256:")
            .ok_or_else(|| Error::BadDigest(s.to_string()))?;
        if hex.len() != 64
            || !hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(Error::BadDigest(s.to_string()));
        }
        Ok(Self(s.to_string()))
    }

    /// The digest of `data`.
    pub fn of(data: &[u8]) -> Self {
        Self::from_hasher(Sha256::new_with_prefix(data))
    }

    fn from_hasher(h: Sha256) -> Self {
        Self(format!("sha256:{}", hex::encode(h.finalize())))
    }

    /// The hex part, used as a file name.
    pub fn hex(&self) -> &str {
        &self.0["sha256:".len()..]
    }

    /// The full `sha256:<hex>` form.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Digest {
    type Error = Error;
    fn try_from(s: String) -> Result<Self, Error> {
        Self::parse(&s)
    }
}

impl From<Digest> for String {
    fn from(d: Digest) -> String {
        d.0
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Wraps a reader; hashes and counts every byte read through it.
pub struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
    count: u64,
}

impl<R: Read> HashingReader<R> {
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            count: 0,
        }
    }

    /// Reads the rest of the stream (e.g. tar padding) so the digest covers it.
    pub fn drain(&mut self) -> io::Result<()> {
        io::copy(self, &mut io::sink()).map(|_| ())
    }

    /// Bytes read so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The digest of everything read.
    pub fn finish(self) -> (Digest, u64) {
        (Digest::from_hasher(self.hasher), self.count)
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_only_sha256_hex() {
        let good = format!("sha256:{}", "a".repeat(64));
        assert_eq!(Digest::parse(&good).expect("valid").hex(), "a".repeat(64));
        for bad in [
            "sha256:abc",
            "sha512:aa",
            &format!("sha256:{}", "A".repeat(64)),
            &format!("sha256:{}/..", "a".repeat(61)),
            "",
        ] {
            assert!(Digest::parse(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn hashing_reader_matches_of() {
        let data = b"hello world";
        let mut r = HashingReader::new(&data[..]);
        r.drain().expect("drain");
        let (d, n) = r.finish();
        assert_eq!(n, 11);
        assert_eq!(d, Digest::of(data));
        assert_eq!(
            d.as_str(),
            "sha256:b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"
        );
    }
}
