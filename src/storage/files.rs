//! The data directory's files are private to the server's user: every tenant's text is in the
//! clear there. A new directory and store file are created with owner-only modes; an existing
//! one is tightened (never loosened), or refused when it is a shared directory.

use std::path::Path;

use super::{STORE_FILE, StorageResult, io};

/// Mode of the data directory: it holds every tenant's text in the clear, so only the server's
/// own user may enter it (as snapshot directories).
pub const DIRECTORY_MODE: u32 = 0o700;
/// Mode of the store file.
pub const FILE_MODE: u32 = 0o600;

/// Creates `directory` (and missing parents) with mode [`DIRECTORY_MODE`], or takes group and
/// other access away from an existing one, saying so in the log. An existing directory that is
/// open to others and is not a data directory (it holds other files, or is a shared directory
/// such as `/tmp`) is refused, never changed: `storage.dir` must be a directory of its own.
pub fn private_directory(directory: &Path) -> StorageResult<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let shown = directory.display().to_string();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIRECTORY_MODE)
        .create(directory)
        .map_err(|error| io(&shown, error))?;
    let mode = std::fs::metadata(directory).map_err(|error| io(&shown, error))?.permissions().mode();
    if mode & 0o077 != 0 {
        let empty = std::fs::read_dir(directory).map_err(|error| io(&shown, error))?.next().is_none();
        let ours = empty || directory.join(STORE_FILE).exists();
        if !ours || mode & 0o1000 != 0 {
            return Err(io(
                &shown,
                "the directory is open to other users and is not a warrant data directory (it holds other files, or \
                 is shared); set storage.dir to a directory of its own",
            ));
        }
    }
    restrict(directory)
}

/// Creates the file at `path` with mode [`FILE_MODE`] when missing (empty; redb fills it), or
/// takes group and other access away from an existing one, saying so in the log. Done before
/// redb opens it, so the store is never readable by others, not even for a moment.
pub fn private_file(path: &Path) -> StorageResult<()> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(FILE_MODE)
        .open(path)
        .map_err(|error| io(&path.display().to_string(), error))?;
    restrict(path)
}

/// Clears the group and other bits of `path` (never adds any), logging a change.
fn restrict(path: &Path) -> StorageResult<()> {
    use std::os::unix::fs::PermissionsExt;
    let shown = path.display().to_string();
    let current = std::fs::metadata(path).map_err(|error| io(&shown, error))?.permissions().mode() & 0o7777;
    let wanted = current & !0o077;
    if wanted != current {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(wanted)).map_err(|error| io(&shown, error))?;
        tracing::warn!(path = %shown, from = %format!("{current:o}"), to = %format!("{wanted:o}"), "tightened the permissions of the data directory: it holds every tenant's text");
    }
    Ok(())
}
