//! The local index cache of a postgres node (`storage.postgres.cache_dir`): each cached tenant's
//! state written to the node's disk, so that after a restart the tenant loads from it and
//! catches up with the database ([`super::catch_up`]) instead of reading every chunk again.
//!
//! Layout: `<cache_dir>/<sha256 of the tenant id, hex>/` (never the tenant's text) holds one
//! snapshot of the cached engine in the embedded backend's snapshot format
//! ([`crate::snapshot`]: ACL state, per shard the chunks and the vector and lexical index
//! images, every file's size and sha256 in its manifest; written into `.tmp-<id>/`, fsynced,
//! renamed) and `cache.json`, this module's manifest: the tenant's hash, the database's lineage,
//! the tenant's epoch and the commit time of the change that made it (the history the catch-up
//! continues), the embedder, the shard count, the snapshot's id and its manifest's sha256.
//! `cache.json` is written after the snapshot, into `cache.json.tmp`, fsynced, renamed, the
//! directory fsynced. Directories are created 0700, files 0600: they hold tenant content.
//!
//! Invariants:
//! - A set is used only when `cache.json` names this tenant's hash, this database's lineage, the
//!   configured embedder and shard count, a size within the budget, and the snapshot it names
//!   is there with that manifest, that epoch and lineage, every file's size and checksum
//!   holding ([`crate::snapshot::restore`]), and ACL entries of this tenant alone. Then it is
//!   caught up through the catch-up path, which checks that the database continues its history
//!   (the commit at its epoch, no epoch missing, the epoch not gone back) and applies every
//!   change since: a revoke or delete made while the node was down is enforced before the
//!   tenant serves a read. Anything else is logged and the tenant loads from the database;
//!   a local set never widens access and never fails a read (reads are SQL meanwhile).
//! - A crash at any point leaves either the previous `cache.json` (naming a snapshot that is
//!   there, or one pruned already: then the set is not used) or the new one; torn `.tmp-*`
//!   directories and `cache.json.tmp` are ignored and removed before a set is read.
//! - Writes are bounded: after a load from the database, after a load from the local set that
//!   caught up [`REWRITE_EPOCHS`] or more, and after a catch-up that leaves the tenant that far
//!   past its last set; one write per tenant at a time, one at a time per node, in the
//!   background. A tenant is not written at eviction (its set is at most [`REWRITE_EPOCHS`]
//!   behind already) nor at epoch 0 (nothing to hold).
//! - Disk is bounded (`storage.postgres.cache_dir_mb`): after each write, under the same lock,
//!   the least recently used other sets (by their `cache.json`'s modification time, set at
//!   every write and every load from the set) are removed until the sets fit, each renamed to
//!   `.del-<hash>` first so that a crash never leaves half a set under a tenant's name. A
//!   tenant estimated larger than the disk budget is not written; one found larger once
//!   written is removed again. So an evicted or deleted tenant's set leaves the disk once
//!   newer sets need its room. A load reading a set that is being removed fails its checks and
//!   loads from the database.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::snapshot::{self, Restored};

use super::{Cached, TenantCache};

/// Epochs a cached tenant may move past its last local set before the set is written again:
/// what a restart catches up at most (beyond it a write costs less than the catch-up it saves).
pub const REWRITE_EPOCHS: u64 = 256;
/// The format of `cache.json` this build writes and reads.
const FORMAT: u32 = 1;
/// This module's manifest in a tenant's directory.
const MANIFEST: &str = "cache.json";
/// `cache.json` being written.
const MANIFEST_TMP: &str = "cache.json.tmp";
/// Prefix of a directory being removed: a tenant's set past the disk budget (in the cache's
/// root), a pruned snapshot (in a tenant's directory; the snapshot writer's name).
const DOOMED_PREFIX: &str = ".del-";
/// Prefixes of the snapshot writer's torn or doomed directories.
const LEFTOVER_PREFIXES: [&str; 2] = [".tmp-", DOOMED_PREFIX];

/// `cache.json`: what a tenant's local set is, checked before it is used.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LocalManifest {
    /// [`FORMAT`].
    pub(super) format: u32,
    /// sha256 of the tenant id, hex (the directory's name).
    pub(super) tenant: String,
    /// The database's lineage the state was loaded from.
    pub(super) lineage: String,
    /// The tenant's epoch in the database the state is at.
    pub(super) epoch: u64,
    /// The commit time of the change at `epoch` (the catch-up checks that the database still
    /// has it).
    pub(super) committed: Option<String>,
    /// Embedder `name/dimension`.
    pub(super) embedder: String,
    /// Shards of the cached tenant.
    pub(super) shards: usize,
    /// Estimated bytes of the cached tenant ([`super::estimated_bytes`]).
    pub(super) bytes: u64,
    /// The snapshot's id (its directory's name).
    pub(super) snapshot: String,
    /// sha256 of the snapshot's `manifest.json`, hex.
    pub(super) snapshot_manifest_sha256: String,
}

/// What a node expects of a local set: its database, embedder and shards.
pub(super) struct Expected<'a> {
    pub(super) lineage: &'a str,
    pub(super) embedder_name: &'a str,
    pub(super) dimension: usize,
    pub(super) shards: usize,
    pub(super) budget_bytes: u64,
    pub(super) vector: crate::index::vector::VectorParams,
}

/// The local sets of one node under `storage.postgres.cache_dir`.
#[derive(Debug)]
pub(super) struct LocalSets {
    root: PathBuf,
    /// Disk for all sets, bytes (`storage.postgres.cache_dir_mb`).
    budget_bytes: u64,
    /// One write at a time on this node (snapshot and `cache.json` together).
    writing: tokio::sync::Mutex<()>,
}

/// The directory name of `tenant`'s set: its id hashed (tenant ids never reach the disk).
pub(super) fn tenant_hash(tenant: &str) -> String {
    hex::encode(Sha256::digest(tenant.as_bytes()))
}

/// Whether `name` is a tenant set's directory name ([`tenant_hash`]: 64 lowercase hex digits).
fn is_set_name(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
}

fn create_private_dir(path: &Path) -> std::io::Result<()> {
    fs::DirBuilder::new().recursive(true).mode(0o700).create(path)
}

fn sync_directory(path: &Path) -> std::io::Result<()> {
    fs::File::open(path)?.sync_all()
}

/// Writes `manifest` as the `cache.json` of `directory` (temporary file, fsync, rename, fsync of
/// the directory). Blocking.
fn write_manifest(directory: &Path, manifest: &LocalManifest) -> std::io::Result<()> {
    let temporary = directory.join(MANIFEST_TMP);
    let _ = fs::remove_file(&temporary);
    let bytes = serde_json::to_vec_pretty(manifest).map_err(std::io::Error::other)?;
    let mut file = fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&temporary)?;
    file.write_all(&bytes)?;
    file.sync_all()?;
    drop(file);
    fs::rename(&temporary, directory.join(MANIFEST))?;
    sync_directory(directory)
}

impl LocalSets {
    pub(super) fn new(root: PathBuf, budget_bytes: u64) -> Self {
        Self { root, budget_bytes, writing: tokio::sync::Mutex::new(()) }
    }

    /// `tenant`'s directory.
    pub(super) fn directory(&self, tenant: &str) -> PathBuf {
        self.root.join(tenant_hash(tenant))
    }

    /// `tenant`'s `cache.json`, parsed (not checked); `None` when there is none or it does not
    /// parse.
    pub(super) fn manifest(&self, tenant: &str) -> Option<LocalManifest> {
        let bytes = fs::read(self.directory(tenant).join(MANIFEST)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Removes what an interrupted write left in `tenant`'s directory (torn snapshot
    /// directories, a `cache.json` not renamed); returns how many entries went.
    pub(super) fn clean(&self, tenant: &str) -> usize {
        let directory = self.directory(tenant);
        let Ok(entries) = fs::read_dir(&directory) else { return 0 };
        let mut removed = 0;
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            let outcome = if LEFTOVER_PREFIXES.iter().any(|prefix| name.starts_with(prefix)) {
                fs::remove_dir_all(entry.path())
            } else if name == MANIFEST_TMP {
                fs::remove_file(entry.path())
            } else {
                continue;
            };
            match outcome {
                Ok(()) => removed += 1,
                Err(error) => tracing::warn!(%error, entry = %name, "could not remove a torn local index set file"),
            }
        }
        removed
    }

    /// Marks `tenant`'s set used now: its `cache.json`'s modification time, the recency
    /// [`Self::prune`] goes by. Blocking; a failure only makes the set look older.
    fn touch(&self, tenant: &str) {
        let path = self.directory(tenant).join(MANIFEST);
        let touched =
            fs::OpenOptions::new().write(true).open(&path).and_then(|file| file.set_modified(SystemTime::now()));
        if let Err(error) = touched {
            tracing::debug!(%error, "could not mark a local index set as used");
        }
    }

    /// Removes sets, least recently used first, until those left fit the disk budget: never
    /// `keep`'s (a tenant hash) unless it alone is over the budget. Also removes what an
    /// interrupted removal left. Returns the sets removed, the bytes left and whether `keep`'s
    /// set is still there. Blocking; the caller holds `writing`, so no set is being written
    /// meanwhile.
    pub(super) fn prune(&self, keep: &str) -> (usize, u64, bool) {
        let Ok(entries) = fs::read_dir(&self.root) else { return (0, 0, false) };
        let mut sets = Vec::new();
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(DOOMED_PREFIX) {
                if let Err(error) = fs::remove_dir_all(entry.path()) {
                    tracing::warn!(%error, "could not remove a local index set being removed");
                }
                continue;
            }
            if !is_set_name(&name) || !entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                continue;
            }
            let path = entry.path();
            let used = fs::metadata(path.join(MANIFEST))
                .or_else(|_| entry.metadata())
                .and_then(|metadata| metadata.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            sets.push((used, name, snapshot::directory_bytes(&path)));
        }
        // Least recently used first; `keep` last, removed only when it alone is over budget.
        sets.sort_by(|a, b| (a.1 == keep, a.0, &a.1).cmp(&(b.1 == keep, b.0, &b.1)));
        let mut held: u64 = sets.iter().map(|set| set.2).sum();
        let (mut removed, mut kept) = (0, sets.iter().any(|set| set.1 == keep));
        for (_, name, bytes) in &sets {
            if held <= self.budget_bytes {
                break;
            }
            let doomed = self.root.join(format!("{DOOMED_PREFIX}{name}"));
            let outcome = fs::rename(self.root.join(name), &doomed)
                .and_then(|()| sync_directory(&self.root))
                .and_then(|()| fs::remove_dir_all(&doomed));
            match outcome {
                Ok(()) => {
                    held -= bytes;
                    removed += 1;
                    kept &= name != keep;
                }
                Err(error) => tracing::warn!(%error, set = %name, "could not remove a local index set"),
            }
        }
        (removed, held, kept)
    }

    /// Reads `tenant`'s set and checks it against `expected` (see the module's documentation);
    /// `Ok(None)` when there is none, `Err` (why) when there is one that cannot be used.
    /// Blocking: reads, hashes and decodes every file.
    pub(super) fn read(
        &self,
        tenant: &str,
        expected: &Expected<'_>,
    ) -> Result<Option<(LocalManifest, Restored)>, String> {
        let directory = self.directory(tenant);
        let bytes = match fs::read(directory.join(MANIFEST)) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(format!("{MANIFEST}: {error}")),
        };
        let manifest: LocalManifest = serde_json::from_slice(&bytes).map_err(|error| format!("{MANIFEST}: {error}"))?;
        let embedder = format!("{}/{}", expected.embedder_name, expected.dimension);
        if manifest.format != FORMAT {
            return Err(format!("{MANIFEST}: format {} is not {FORMAT}", manifest.format));
        }
        if manifest.tenant != tenant_hash(tenant) {
            return Err("the set is another tenant's".into());
        }
        if manifest.lineage != expected.lineage {
            return Err("the set is of another database (lineage)".into());
        }
        if manifest.embedder != embedder || manifest.shards != expected.shards {
            return Err("the set's embedder or shard count is not this node's".into());
        }
        if manifest.bytes > expected.budget_bytes {
            return Err("the set is larger than the cache's budget".into());
        }
        if !snapshot::is_safe_name(&manifest.snapshot) {
            return Err(format!("{MANIFEST}: the snapshot's name is not a plain name"));
        }
        let snapshot_directory = directory.join(&manifest.snapshot);
        let snapshot_manifest = fs::read(snapshot_directory.join(snapshot::MANIFEST))
            .map_err(|error| format!("the snapshot {}: {error}", manifest.snapshot))?;
        if hex::encode(Sha256::digest(&snapshot_manifest)) != manifest.snapshot_manifest_sha256 {
            return Err("the snapshot's manifest is not the one cache.json records".into());
        }
        let restored =
            snapshot::restore(&snapshot_directory, expected.embedder_name, expected.dimension, expected.vector)
                .map_err(|error| error.to_string())?;
        let restored_manifest = &restored.manifest;
        if restored_manifest.snapshot_id != manifest.snapshot
            || restored_manifest.acl_epoch != manifest.epoch
            || restored_manifest.lineage.as_deref() != Some(expected.lineage)
            || restored_manifest.shards != expected.shards
            || restored.acl.epoch() != manifest.epoch
        {
            return Err("the snapshot's id, epoch, lineage or shards are not cache.json's".into());
        }
        if restored.acl.load().tenant_names().any(|name| name != tenant) {
            return Err("the snapshot holds another tenant's documents".into());
        }
        Ok(Some((manifest, restored)))
    }
}

impl TenantCache {
    /// `tenant` from its local set, caught up to the database; `None` (logged when a set was
    /// there but could not be used) when there is no usable set: the caller loads from the
    /// database.
    pub(super) async fn load_local(&self, tenant: &str) -> Option<Arc<Cached>> {
        let local = Arc::clone(self.local.as_ref()?);
        let hash = tenant_hash(tenant);
        let (owner, lineage) = (tenant.to_owned(), self.lineage.clone());
        let (embedder_name, dimension) = (self.embedder.name().to_owned(), self.embedder.dimension());
        let (shards, budget_bytes, vector) =
            (self.params.shards.max(1), self.params.budget_bytes, self.vector_params());
        let read = tokio::task::spawn_blocking(move || {
            let removed = local.clean(&owner);
            if removed > 0 {
                tracing::info!(removed, "removed torn files of an interrupted local index set write");
            }
            let expected =
                Expected { lineage: &lineage, embedder_name: &embedder_name, dimension, shards, budget_bytes, vector };
            let read = local.read(&owner, &expected);
            if matches!(read, Ok(Some(_))) {
                local.touch(&owner);
            }
            read
        })
        .await
        .unwrap_or_else(|error| Err(format!("the reading thread failed: {error}")));
        let (manifest, restored) = match read {
            Ok(Some(found)) => found,
            Ok(None) => return None,
            Err(reason) => return refuse(&hash, &reason),
        };
        let engine = match crate::embedded::Engine::start_with_coordinators(
            self.engine_params(),
            Arc::clone(&self.embedder),
            Arc::new(restored.acl),
            Some(restored.shards),
            1,
        ) {
            Ok(engine) => engine,
            Err(error) => return refuse(&hash, &error.to_string()),
        };
        let search = engine.shard_search();
        let cached = Cached::new(engine, search, manifest.bytes, self.lineage.clone(), manifest.committed.clone());
        cached.saved.store(manifest.epoch, Ordering::SeqCst);
        let mut history = manifest.committed;
        if let Err(behind) = self.apply_changes(tenant, &cached, &mut history).await {
            return refuse(&hash, &format!("the catch-up from its epoch did not hold ({})", behind.reason));
        }
        *cached.history.lock().await = history;
        Some(Arc::new(cached))
    }

    /// Writes `cached` (`tenant`'s entry) as its local set in the background, unless the local
    /// cache is off, the tenant is at epoch 0, or a write of this entry is in flight.
    pub(super) fn save_local(self: &Arc<Self>, tenant: &str, cached: &Arc<Cached>) {
        let Some(local) = self.local.clone() else { return };
        if cached.engine.acl().epoch() == 0 || cached.saving.swap(true, Ordering::SeqCst) {
            return;
        }
        let (cache, entry, owner) = (Arc::clone(self), Arc::clone(cached), tenant.to_owned());
        let task = async move {
            let outcome = cache.write_local(&local, &owner, &entry).await;
            let label = match outcome {
                Ok(epoch) => {
                    entry.saved.store(epoch, Ordering::SeqCst);
                    "written"
                }
                Err(reason) => {
                    tracing::warn!(set = %tenant_hash(&owner), %reason, "a local index set was not written");
                    "failed"
                }
            };
            entry.saving.store(false, Ordering::SeqCst);
            metrics::counter!("warrant_tenant_cache_local_writes_total", "outcome" => label).increment(1);
        };
        if !self.runner().is_some_and(|runner| runner.spawn(task)) {
            cached.saving.store(false, Ordering::SeqCst);
        }
    }

    /// Writes `tenant`'s local set after a catch-up when the entry moved [`REWRITE_EPOCHS`] past
    /// its last one.
    pub(super) fn save_local_if_behind(self: &Arc<Self>, tenant: &str, cached: &Arc<Cached>) {
        if self.local.is_some()
            && cached.engine.acl().epoch().saturating_sub(cached.saved.load(Ordering::SeqCst)) >= REWRITE_EPOCHS
        {
            self.save_local(tenant, cached);
        }
    }

    /// The snapshot, then `cache.json`; the epoch written. A catch-up that moved the engine
    /// between reading its history and capturing it makes the snapshot's epoch another than the
    /// history's: that snapshot is removed and nothing is recorded (a later catch-up writes).
    async fn write_local(&self, local: &Arc<LocalSets>, tenant: &str, cached: &Cached) -> Result<u64, String> {
        if cached.bytes > local.budget_bytes {
            return Err("the tenant is estimated larger than storage.postgres.cache_dir_mb".into());
        }
        let _one_at_a_time = local.writing.lock().await;
        let (epoch, committed) = {
            let history = cached.history.lock().await;
            (cached.engine.acl().epoch(), history.clone())
        };
        let directory = local.directory(tenant);
        let root = local.root.clone();
        let made = directory.clone();
        tokio::task::spawn_blocking(move || {
            create_private_dir(&root)?;
            create_private_dir(&made)
        })
        .await
        .map_err(|error| error.to_string())?
        .map_err(|error| format!("creating the set's directory: {error}"))?;
        let created = snapshot::create(&cached.engine, &directory, 1).await.map_err(|error| error.to_string())?;
        if created.acl_epoch != epoch {
            let _ = tokio::task::spawn_blocking(move || fs::remove_dir_all(&created.path)).await;
            return Err("the tenant moved while it was written".into());
        }
        let manifest = LocalManifest {
            format: FORMAT,
            tenant: tenant_hash(tenant),
            lineage: cached.lineage.clone(),
            epoch,
            committed,
            embedder: format!("{}/{}", self.embedder.name(), self.embedder.dimension()),
            shards: self.params.shards.max(1),
            bytes: cached.bytes,
            snapshot: created.snapshot_id.clone(),
            snapshot_manifest_sha256: String::new(),
        };
        let path = created.path.join(snapshot::MANIFEST);
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            let snapshot_manifest = fs::read(&path)?;
            let manifest =
                LocalManifest { snapshot_manifest_sha256: hex::encode(Sha256::digest(&snapshot_manifest)), ..manifest };
            write_manifest(&directory, &manifest)
        })
        .await
        .map_err(|error| error.to_string())?
        .map_err(|error| format!("writing {MANIFEST}: {error}"))?;
        let (sets, hash) = (Arc::clone(local), tenant_hash(tenant));
        let (removed, held, kept) =
            tokio::task::spawn_blocking(move || sets.prune(&hash)).await.map_err(|error| error.to_string())?;
        metrics::counter!("warrant_tenant_cache_local_removed_total").increment(removed as u64);
        metrics::gauge!("warrant_tenant_cache_local_bytes").set(held as f64);
        if !kept {
            return Err("the set alone is larger than storage.postgres.cache_dir_mb: removed".into());
        }
        Ok(epoch)
    }

    /// The epoch of `tenant`'s local set as its `cache.json` records it (not checked; tests and
    /// operators); `None` without one.
    pub fn local_set_epoch(&self, tenant: &str) -> Option<u64> {
        self.local.as_ref()?.manifest(tenant).map(|manifest| manifest.epoch)
    }

    /// `tenant`'s local set directory (`<cache_dir>/<sha256 of the tenant>`), when the local
    /// cache is on.
    pub fn local_set_directory(&self, tenant: &str) -> Option<PathBuf> {
        self.local.as_ref().map(|local| local.directory(tenant))
    }
}

/// Logs and counts a local set that could not be used; `None`.
fn refuse(hash: &str, reason: &str) -> Option<Arc<Cached>> {
    tracing::warn!(set = %hash, %reason, "the local index set was not used; the tenant loads from the database");
    metrics::counter!("warrant_tenant_cache_local_refused_total").increment(1);
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenants_directory_is_its_hash_never_its_text() {
        let sets = LocalSets::new(PathBuf::from("/cache"), 1 << 20);
        let directory = sets.directory("../acme/../../etc");
        assert_eq!(directory.parent(), Some(Path::new("/cache")));
        let name = directory.file_name().and_then(|name| name.to_str()).unwrap_or_default();
        assert_eq!(name.len(), 64);
        assert!(name.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(sets.directory("acme"), sets.directory("Acme"));
    }

    /// Gives `tenant` a set of `bytes` bytes of snapshot plus a 2-byte `cache.json` last used
    /// `age` seconds ago.
    fn fake_set(sets: &LocalSets, tenant: &str, bytes: usize, age: u64) {
        let directory = sets.directory(tenant);
        fs::create_dir_all(directory.join("1-1")).unwrap();
        fs::write(directory.join("1-1").join("shard-0000.chunks.bin"), vec![0_u8; bytes]).unwrap();
        fs::write(directory.join(MANIFEST), b"{}").unwrap();
        let manifest = fs::OpenOptions::new().write(true).open(directory.join(MANIFEST)).unwrap();
        manifest.set_modified(SystemTime::now() - std::time::Duration::from_secs(age)).unwrap();
    }

    #[test]
    fn past_the_disk_budget_the_least_recently_used_sets_go_first_never_the_one_just_written() {
        let root = tempfile::tempdir().unwrap();
        let sets = LocalSets::new(root.path().to_owned(), 2 * 1_002);
        fake_set(&sets, "acme", 1_000, 300);
        fake_set(&sets, "globex", 1_000, 100);
        fake_set(&sets, "initech", 1_000, 200);
        // The set just written is the oldest by its time, and stays.
        fake_set(&sets, "umbrella", 1_000, 400);
        // Not a set: neither counted nor removed. A removal a crash interrupted: removed.
        fs::create_dir(root.path().join("notes")).unwrap();
        fs::write(root.path().join("notes").join("big"), vec![0_u8; 10_000]).unwrap();
        fs::create_dir(root.path().join(format!("{DOOMED_PREFIX}{}", tenant_hash("hooli")))).unwrap();

        // Loading initech from its set makes it the most recently used.
        sets.touch("initech");
        assert_eq!(sets.prune(&tenant_hash("umbrella")), (2, 2_004, true));
        let left: Vec<bool> =
            ["acme", "globex", "initech", "umbrella"].iter().map(|tenant| sets.directory(tenant).exists()).collect();
        assert_eq!(left, [false, false, true, true], "acme and globex were the least recently used");
        assert!(root.path().join("notes").join("big").exists());
        let names: Vec<String> = fs::read_dir(root.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into())
            .collect();
        assert!(names.iter().all(|name| !name.starts_with(DOOMED_PREFIX)), "{names:?}");

        // A set alone over the budget goes too.
        let tiny = LocalSets::new(root.path().to_owned(), 500);
        assert_eq!(tiny.prune(&tenant_hash("umbrella")), (2, 0, false));
        assert!(!sets.directory("umbrella").exists());
    }
}
