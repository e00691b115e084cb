//! The ingested folder: its files listed with their ids, and each folder's access list.
//!
//! A folder's sidecar [`ACL_SIDECAR`] is the access list of its files and of every folder below
//! it, down to the next folder with a sidecar of its own (the nearest sidecar wins; the run's
//! flags only where no folder above has one): one sidecar on `legal/` covers `legal/archive/`,
//! never falling back to the flags beneath it. Sidecars are read while the folder is listed.
//!
//! Invariants: a symbolic link is never followed, whatever it points at (out of the folder it
//! would upload what the folder does not hold; inside it, it names a file ingested under its
//! own id): each one is listed as not read, with the reason, so none goes unmentioned; a
//! sidecar that is a link ends the run (its folders' access list cannot be known, and falling
//! back to another would fail open). Dot files and folders are not listed.
//!
//! A file is read as it was listed, or not at all: the walk records each entry's identity
//! (device and inode, from the listed folder itself, never through a link), and a file is opened
//! `O_NOFOLLOW` and read only when the opened handle's identity is the listed one; a link
//! swapped in since, another file renamed over it, or a folder above it replaced, is reported as
//! not read (never read). Each folder is likewise opened `O_NOFOLLOW | O_DIRECTORY`, its
//! identity checked against its parent's listing, and listed through that handle
//! (`/proc/self/fd`, where there is one; elsewhere by its path, checked again after the
//! listing), so a folder swapped for a link while the walk runs is not listed as if it were the
//! folder.

use std::ffi::OsString;
use std::fs::Metadata;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{ACL_SIDECAR, IngestError, IngestResult, io};
use crate::domain::DocAcl;

/// Why a symbolic link in the folder is not read.
pub(super) const LINK_NOT_FOLLOWED: &str =
    "a symbolic link: never followed (ingest the file it points at from its own place)";

/// Why a file is not read when it became a link after the walk listed it.
const LINKED_SINCE: &str = "a symbolic link since the folder was listed: never followed";
/// Why a file (or folder) is not read when it is not the one the walk listed.
const REPLACED_SINCE: &str = "replaced since the folder was listed: not read (the next run reads it)";

/// A file's (or folder's) identity: its device and inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Identity {
    device: u64,
    inode: u64,
}

impl Identity {
    fn of(metadata: &Metadata) -> Self {
        Self { device: metadata.dev(), inode: metadata.ino() }
    }
}

/// A file the walk listed.
#[derive(Debug)]
pub(super) struct Listed {
    /// Its document id: the path relative to the root, `/`-separated.
    pub(super) id: String,
    /// Its path.
    pub(super) path: PathBuf,
    /// Its identity as listed.
    identity: Identity,
    /// Its access list: the nearest sidecar's at or above its folder, else the run's.
    pub(super) acl: Arc<DocAcl>,
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

/// Every file under `root` (dot files and folders excluded), sorted by id, each with its access
/// list (`default` where no sidecar covers it); see the module's invariants.
pub(super) fn walk(root: &Path, default: &DocAcl) -> IngestResult<Listing> {
    let mut listing = Listing::default();
    // (folder, its identity in its parent's listing (none for the root, which may be a link),
    // the access list it inherits).
    let mut folders: Vec<(PathBuf, Option<Identity>, Arc<DocAcl>)> =
        vec![(root.to_path_buf(), None, Arc::new(default.clone()))];
    while let Some((folder, listed, inherited)) = folders.pop() {
        let Some(entries) = list_folder(&folder, listed)? else {
            listing.unread.push((id_of(root, &folder)?, REPLACED_SINCE.into()));
            continue;
        };
        let sidecar = entries.iter().find(|(name, _)| name == ACL_SIDECAR);
        let acl = match sidecar {
            Some((_, metadata)) => Arc::new(read_sidecar(&folder.join(ACL_SIDECAR), metadata)?),
            None => inherited,
        };
        for (name, metadata) in entries {
            if name.to_string_lossy().starts_with('.') {
                continue;
            }
            let path = folder.join(&name);
            let kind = metadata.file_type();
            if kind.is_dir() {
                folders.push((path, Some(Identity::of(&metadata)), Arc::clone(&acl)));
            } else if kind.is_file() {
                let (id, identity) = (id_of(root, &path)?, Identity::of(&metadata));
                listing.files.push(Listed { id, path, identity, acl: Arc::clone(&acl) });
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

/// The entries of `folder` with their metadata (of the entry itself, never through a link),
/// listed through a handle of the folder whose identity is `listed` (when given; the folder is
/// then opened `O_NOFOLLOW`); `None` when the folder is not the one listed (a link now, or
/// another folder).
fn list_folder(folder: &Path, listed: Option<Identity>) -> IngestResult<Option<Vec<(OsString, Metadata)>>> {
    let no_follow = if listed.is_some() { libc::O_NOFOLLOW } else { 0 };
    let opened = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY | no_follow).open(folder);
    let handle = match opened {
        Ok(handle) => handle,
        Err(error) if matches!(error.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) && listed.is_some() => {
            return Ok(None);
        }
        Err(error) => return Err(io(folder, error)),
    };
    let identity = Identity::of(&handle.metadata().map_err(|error| io(folder, error))?);
    if listed.is_some_and(|listed| listed != identity) {
        return Ok(None);
    }
    // The handle's own directory (a magic link of Linux's /proc), else the path, checked after.
    let through_handle = {
        use std::os::fd::AsRawFd;
        std::fs::read_dir(format!("/proc/self/fd/{}", handle.as_raw_fd())).ok()
    };
    let by_path = through_handle.is_none();
    let reader = match through_handle {
        Some(reader) => reader,
        None => std::fs::read_dir(folder).map_err(|error| io(folder, error))?,
    };
    let mut entries = Vec::new();
    for entry in reader {
        let entry = entry.map_err(|error| io(folder, error))?;
        // On Linux, `fstatat` on the listed directory's own descriptor, not following a link.
        let metadata = entry.metadata().map_err(|error| io(&folder.join(entry.file_name()), error))?;
        entries.push((entry.file_name(), metadata));
    }
    if by_path {
        let now = if listed.is_some() { std::fs::symlink_metadata(folder) } else { std::fs::metadata(folder) };
        let same = now.map(|metadata| metadata.is_dir() && Identity::of(&metadata) == identity).unwrap_or(false);
        if !same {
            return Ok(None);
        }
    }
    drop(handle);
    Ok(Some(entries))
}

/// The bytes of `listed`, when the file opened (`O_NOFOLLOW`) is the one listed: else the
/// reason it is not read (a link now, another file, gone). An error that is no such reason
/// (permission denied) ends the run.
pub(super) fn read(listed: &Listed) -> IngestResult<Result<Vec<u8>, String>> {
    use std::io::Read;
    let path = &listed.path;
    // O_NONBLOCK: a FIFO swapped in is opened without waiting for a writer (then refused).
    let opened = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path);
    let mut file = match opened {
        Ok(file) => file,
        Err(error) if error.raw_os_error() == Some(libc::ELOOP) => return Ok(Err(LINKED_SINCE.into())),
        Err(error) if error.raw_os_error() == Some(libc::ENOTDIR) => return Ok(Err(REPLACED_SINCE.into())),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Err("removed since the folder was listed".into()));
        }
        Err(error) => return Err(io(path, error)),
    };
    let metadata = file.metadata().map_err(|error| io(path, error))?;
    if !metadata.is_file() || Identity::of(&metadata) != listed.identity {
        return Ok(Err(REPLACED_SINCE.into()));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(metadata.len()).unwrap_or(0));
    file.read_to_end(&mut bytes).map_err(|error| io(path, error))?;
    Ok(Ok(bytes))
}

/// The access list in the sidecar at `path`, listed with `metadata`. A sidecar that is a
/// symbolic link, not a file, replaced since it was listed or not an access list ends the run:
/// the access list of its folders cannot be known, and any other would fail open.
fn read_sidecar(path: &Path, metadata: &Metadata) -> IngestResult<DocAcl> {
    use std::io::Read;
    let linked = || io(path, "is a symbolic link: a folder's access list is never read through one (remove the link)");
    let refused = |reason: &str| IngestError::Io { path: path.display().to_string(), reason: reason.to_owned() };
    if metadata.file_type().is_symlink() {
        return Err(linked());
    }
    if !metadata.is_file() {
        return Err(refused("not a regular file: a folder's access list is a JSON file"));
    }
    let opened = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path);
    let mut file = match opened {
        Ok(file) => file,
        Err(error) if error.raw_os_error() == Some(libc::ELOOP) => return Err(linked()),
        Err(error) => return Err(io(path, error)),
    };
    let opened = file.metadata().map_err(|error| io(path, error))?;
    if !opened.is_file() || Identity::of(&opened) != Identity::of(metadata) {
        return Err(refused("replaced while the folder was listed: run again"));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(|error| io(path, error))?;
    serde_json::from_slice(&bytes).map_err(|error| io(path, error))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder swapped for a link to itself, or for another folder, after its parent listed it
    /// is not listed as if it were the folder (issue 57.6, the folder's part).
    #[test]
    fn a_folder_is_listed_only_when_it_is_the_one_its_parent_listed() {
        let root = tempfile::tempdir().unwrap();
        let folder = root.path().join("policies");
        std::fs::create_dir(&folder).unwrap();
        std::fs::write(folder.join("travel.md"), "# Travel").unwrap();
        let listed = Identity::of(&std::fs::symlink_metadata(&folder).unwrap());
        let entries = list_folder(&folder, Some(listed)).unwrap().expect("the folder listed");
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].0, "travel.md");
        assert_eq!(Identity::of(&entries[0].1), Identity::of(&std::fs::metadata(folder.join("travel.md")).unwrap()));

        // The same folder behind a link: not listed (O_NOFOLLOW), though it is the very folder.
        std::fs::rename(&folder, root.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(root.path().join("moved"), &folder).unwrap();
        assert!(list_folder(&folder, Some(listed)).unwrap().is_none());
        // Another folder at its name: not listed.
        std::fs::remove_file(&folder).unwrap();
        std::fs::create_dir(&folder).unwrap();
        assert!(list_folder(&folder, Some(listed)).unwrap().is_none());
        // The root is given by the operator, a link or not.
        let link = root.path().join("root-link");
        std::os::unix::fs::symlink(root.path().join("moved"), &link).unwrap();
        assert_eq!(list_folder(&link, None).unwrap().map(|entries| entries.len()), Some(1));
    }
}
