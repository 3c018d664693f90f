//! The config file's errors: [`FieldError`] names the file and the field
//! path (static pod manifests and kubeconfigs report theirs with it too),
//! [`ConfigError`] adds a file that cannot be read, its I/O error whole.

use std::fmt;
use std::path::PathBuf;

/// An error in a file: the file, the field path in it, what is wrong.
/// Printed `<file>: <field.path>: <message>`. Config files and static pod
/// manifests report their errors with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub file: PathBuf,
    pub field: String,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() || self.field == "." {
            write!(f, "{}: {}", self.file.display(), self.message)
        } else {
            write!(
                f,
                "{}: {}: {}",
                self.file.display(),
                self.field,
                self.message
            )
        }
    }
}

impl std::error::Error for FieldError {}

/// The config file could not be used: unreadable, or a field is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Printed as a [`FieldError`] without a field.
    #[error("{}: cannot read: {source}", file.display())]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Field(#[from] FieldError),
}
