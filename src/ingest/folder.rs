//! The ingested folder: its files listed with their ids, and each folder's access list.

use std::path::{Path, PathBuf};

use super::{ACL_SIDECAR, IngestResult, io};
use crate::domain::DocAcl;

/// Every file under `root` (dot files and folders excluded), sorted, with its id.
pub(super) fn walk(root: &Path) -> IngestResult<Vec<(String, PathBuf)>> {
    let mut found = Vec::new();
    let mut folders = vec![root.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).map_err(|error| io(&folder, error))? {
            let entry = entry.map_err(|error| io(&folder, error))?;
            let path = entry.path();
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let kind = entry.file_type().map_err(|error| io(&path, error))?;
            if kind.is_dir() {
                folders.push(path);
            } else if kind.is_file() {
                let relative = path.strip_prefix(root).map_err(|error| io(&path, error))?;
                let id: Vec<String> =
                    relative.components().map(|part| part.as_os_str().to_string_lossy().into_owned()).collect();
                found.push((id.join("/"), path));
            }
        }
    }
    found.sort();
    Ok(found)
}

/// The access list of files in `folder`: its sidecar, else `default`.
pub(super) fn folder_acl(folder: &Path, default: &DocAcl) -> IngestResult<DocAcl> {
    let path = folder.join(ACL_SIDECAR);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|error| io(&path, error)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(default.clone()),
        Err(error) => Err(io(&path, error)),
    }
}
