//! What `picolet upgrade` leaves for the processes that run after it: the
//! record of an upgrade it rolled back, in `<dataDir>/upgrade-rollback.json`.
//! `up` writes it to the service's log at start and leaves it; the agent
//! turns it into a Warning event on the node and removes it.

use std::path::{Path, PathBuf};

/// The rollback record's file name under the data root.
pub const ROLLBACK_FILE: &str = "upgrade-rollback.json";

/// One rolled-back upgrade.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rollback {
    /// sha256 of the binary that did not become healthy.
    pub failed_sha256: String,
    /// sha256 of the binary put back.
    pub restored_sha256: String,
    /// Why: what health did not come, or the count of failed starts.
    pub reason: String,
}

impl Rollback {
    /// One line for a log or an event.
    pub fn message(&self) -> String {
        format!(
            "upgrade to picolet sha256:{} rolled back to sha256:{}: {}",
            short(&self.failed_sha256),
            short(&self.restored_sha256),
            self.reason
        )
    }
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

pub fn rollback_path(data_dir: &Path) -> PathBuf {
    data_dir.join(ROLLBACK_FILE)
}

/// A rollback record that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct BadRecord {
    pub path: PathBuf,
    pub source: serde_yaml::Error,
}

/// Reads the record; none when there is none. A record that does not
/// parse is its error (a reader logs it and removes it).
pub fn read_rollback(data_dir: &Path) -> Option<Result<Rollback, BadRecord>> {
    let path = rollback_path(data_dir);
    let bytes = std::fs::read(&path).ok()?;
    Some(serde_yaml::from_slice(&bytes).map_err(|source| BadRecord { path, source }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_and_names_both_binaries() {
        let d = tempfile::tempdir().expect("tempdir");
        assert!(read_rollback(d.path()).is_none());
        let r = Rollback {
            failed_sha256: "a".repeat(64),
            restored_sha256: "b".repeat(64),
            reason: "not healthy in 120s".into(),
        };
        let json = serde_yaml::to_string(&r).expect("yaml");
        std::fs::write(rollback_path(d.path()), json).expect("write");
        assert_eq!(read_rollback(d.path()).expect("there").expect("parses"), r);
        assert_eq!(
            r.message(),
            "upgrade to picolet sha256:aaaaaaaaaaaa rolled back to sha256:bbbbbbbbbbbb: not healthy in 120s"
        );
        std::fs::write(rollback_path(d.path()), "{").expect("write");
        assert!(matches!(read_rollback(d.path()), Some(Err(_))));
    }
}
