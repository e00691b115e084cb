//! The state file [`STATE_FILE`] of an ingested folder: the destination it was written for and
//! the fingerprint each document id was acknowledged with.
//!
//! Invariants: acknowledgements written for another destination are set aside on load; the file
//! is replaced atomically (temporary file, fsync, rename).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{IngestResult, STATE_FILE, io};

/// The acknowledged fingerprints, by document id, and whom they were acknowledged by.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct State {
    /// [`super::Destination::key`] (absent in state files of earlier builds: taken as this one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    destination: Option<String>,
    /// Document id → fingerprint of what the destination acknowledged.
    pub(super) files: BTreeMap<String, String>,
}

impl State {
    /// The state file's acknowledgements for `key`, and the other destination it named, if any.
    pub(super) fn load(root: &Path, key: &str) -> IngestResult<(Self, Option<String>)> {
        let path = root.join(STATE_FILE);
        let mut state: Self = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|error| io(&path, error))?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Self::default(),
            Err(error) => return Err(io(&path, error)),
        };
        let other = state.destination.take().filter(|written| written != key);
        if other.is_some() {
            state.files.clear();
        }
        state.destination = Some(key.to_owned());
        Ok((state, other))
    }

    /// Replaces the state file atomically (temporary file, fsync, rename).
    pub(super) fn save(&self, root: &Path) -> IngestResult<()> {
        let path = root.join(STATE_FILE);
        let temporary = root.join(format!("{STATE_FILE}.tmp"));
        let bytes = serde_json::to_vec_pretty(self).map_err(|error| io(&path, error))?;
        let mut file = std::fs::File::create(&temporary).map_err(|error| io(&temporary, error))?;
        file.write_all(&bytes).and_then(|()| file.sync_all()).map_err(|error| io(&temporary, error))?;
        std::fs::rename(&temporary, &path).map_err(|error| io(&path, error))
    }
}
