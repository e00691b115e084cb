//! The ingested folder: its files listed with their ids, and each folder's access list.
//!
//! Invariants: a symbolic link is never followed, whatever it points at (out of the folder it
//! would upload what the folder does not hold; inside it, it names a file ingested under its
//! own id): each one is listed as not read, with the reason, so none goes unmentioned; a
//! sidecar that is a link ends the run (its folders' access list cannot be known, and falling
//! back to another would fail open). Dot files and folders are not listed.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::{ACL_SIDECAR, IngestResult, io};
use crate::domain::DocAcl;

/// Why a symbolic link in the folder is not read.
pub(super) const LINK_NOT_FOLLOWED: &str =
    "a symbolic link: never followed (ingest the file it points at from its own place)";

/// A file the walk listed.
#[derive(Debug)]
pub(super) struct Listed {
    /// Its document id: the path relative to the root, `/`-separated.
    pub(super) id: String,
    /// Its path.
    pub(super) path: PathBuf,
}

/// What the walk found: the files, sorted by id, and the entries not read, with the reason.
#[derive(Debug, Default)]
pub(super) struct Listing {
    /// Regular files.
    pub(super) files: Vec<Listed>,
    /// (id, reason) of each symbolic link and each entry that is neither a file nor a folder.
    pub(super) unread: Vec<(String, String)>,
}

/// The document id of `path` under `root`.
fn id_of(root: &Path, path: &Path) -> IngestResult<String> {
    let relative = path.strip_prefix(root).map_err(|error| io(path, error))?;
    let parts: Vec<String> =
        relative.components().map(|part| part.as_os_str().to_string_lossy().into_owned()).collect();
    Ok(parts.join("/"))
}

/// Every file under `root` (dot files and folders excluded), sorted by id; see the module's
/// invariants.
pub(super) fn walk(root: &Path) -> IngestResult<Listing> {
    let mut listing = Listing::default();
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
                listing.files.push(Listed { id: id_of(root, &path)?, path });
            } else if kind.is_symlink() {
                listing.unread.push((id_of(root, &path)?, LINK_NOT_FOLLOWED.into()));
            } else {
                listing.unread.push((id_of(root, &path)?, "not a regular file".into()));
            }
        }
    }
    listing.files.sort_by(|left, right| left.id.cmp(&right.id));
    listing.unread.sort();
    Ok(listing)
}

/// The access list of files in `folder`: its sidecar, else `default`. A sidecar that is a
/// symbolic link is refused.
pub(super) fn folder_acl(folder: &Path, default: &DocAcl) -> IngestResult<DocAcl> {
    let path = folder.join(ACL_SIDECAR);
    match read_no_follow(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|error| io(&path, error)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(default.clone()),
        Err(error) if error.raw_os_error() == Some(libc::ELOOP) => {
            Err(io(&path, "is a symbolic link: a folder's access list is never read through one (remove the link)"))
        }
        Err(error) => Err(io(&path, error)),
    }
}

/// The bytes of the file at `path`, opened `O_NOFOLLOW` (a link there is `ELOOP`).
fn read_no_follow(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}
