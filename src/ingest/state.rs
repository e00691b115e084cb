//! The state file [`STATE_FILE`] of an ingested folder: the destination it was written for and
//! the fingerprint each document id was acknowledged with.
//!
//! Invariants: acknowledgements written for another destination are set aside on load; the file
//! is never read or written through a symbolic link (a state file that is one is refused: the
//! folder is writable by others than the operator, perhaps, and a link there aimed at a
//! server's store once had it overwritten); it is replaced atomically: written and fsynced
//! under a temporary name of its own (unique per write, created `O_EXCL | O_NOFOLLOW`, mode
//! 0600), then renamed over the state file.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{IngestError, IngestResult, STATE_FILE, io};

/// The acknowledged fingerprints, by document id, and whom they were acknowledged by.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct State {
    /// [`super::Destination::key`] (absent in state files of earlier builds: taken as this one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    destination: Option<String>,
    /// Document id → fingerprint of what the destination acknowledged.
    pub(super) files: BTreeMap<String, String>,
}

/// The refusal of a state file that is a symbolic link.
fn linked(path: &Path) -> IngestError {
    io(path, "is a symbolic link: the state file is never read or written through one (remove the link)")
}

/// Refuses `path` when it is a symbolic link (a missing file is fine).
fn refuse_link(path: &Path) -> IngestResult<()> {
    match std::fs::symlink_metadata(path) {
        Ok(metadata) if metadata.file_type().is_symlink() => Err(linked(path)),
        Ok(_) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(io(path, error)),
    }
}

impl State {
    /// The state file's acknowledgements for `key`, and the other destination it named, if any.
    /// A state file that is a symbolic link is refused.
    pub(super) fn load(root: &Path, key: &str) -> IngestResult<(Self, Option<String>)> {
        let path = root.join(STATE_FILE);
        refuse_link(&path)?;
        let opened = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(&path);
        let mut state: Self = match opened {
            Ok(mut file) => {
                let mut bytes = Vec::new();
                file.read_to_end(&mut bytes).map_err(|error| io(&path, error))?;
                serde_json::from_slice(&bytes).map_err(|error| io(&path, error))?
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Self::default(),
            // Made a link since it was looked at.
            Err(error) if error.raw_os_error() == Some(libc::ELOOP) => return Err(linked(&path)),
            Err(error) => return Err(io(&path, error)),
        };
        let other = state.destination.take().filter(|written| written != key);
        if other.is_some() {
            state.files.clear();
        }
        state.destination = Some(key.to_owned());
        Ok((state, other))
    }

    /// Replaces the state file atomically (see the module's invariants); a state file that is a
    /// symbolic link is refused.
    pub(super) fn save(&self, root: &Path) -> IngestResult<()> {
        let path = root.join(STATE_FILE);
        refuse_link(&path)?;
        let bytes = serde_json::to_vec_pretty(self).map_err(|error| io(&path, error))?;
        let temporary = root.join(format!("{STATE_FILE}.{}-{:016x}.tmp", std::process::id(), rand::random::<u64>()));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&temporary)
            .map_err(|error| io(&temporary, error))?;
        let written = file
            .write_all(&bytes)
            .and_then(|()| file.sync_all())
            .map_err(|error| io(&temporary, error))
            .and_then(|()| std::fs::rename(&temporary, &path).map_err(|error| io(&path, error)));
        if written.is_err() {
            let _ = std::fs::remove_file(&temporary);
        }
        written
    }
}
