//! The tenant cache of a postgres node: tenants held in memory as embedded engines (in-memory
//! shard actors, HNSW and BM25, roaring-bitmap ACLs), the database staying the only system of
//! record. A cached tenant's reads run on the same scoped HNSW walk, scoped BM25 (statistics
//! inside the caller's scope, summed over shards) and coordinators as the embedded backend.
//!
//! Owns: the cached tenants ([`TenantCache`]), their loads ([`load`]), their catch-ups
//! ([`catch_up`]), the memory budget and the metrics `warrant_tenant_cache_*` (never labelled by
//! tenant).
//!
//! Invariants:
//! - A cached tenant's engine holds exactly the state of the database at its ACL epoch, which is
//!   the tenant's epoch in the database (`warrant_tenants.acl_epoch`) when it was read: a load
//!   reads the epoch, the live documents with their readers and all chunks with their
//!   embeddings in one REPEATABLE READ transaction; a catch-up reads the change log above the
//!   cached epoch and the chunks of the versions it made live in another, and applies them epoch
//!   by epoch ([`crate::embedded::Engine::apply_replicated`]). Document ordinals are the
//!   database's (`document_versions.doc_ordinal`, global), so a chunk has one ordinal on every
//!   node and in the SQL path's answers.
//! - Never stale: every read first reads the tenant's epoch from the database (one router
//!   statement, [`super::sql::TENANT_EPOCH`]); a cached tenant behind it is caught up before the
//!   read searches, or the read takes the SQL path. So a change acknowledged by any node is
//!   enforced, and new content visible, for every read that starts after the acknowledgement.
//!   A cached epoch above the database's (a database restored from a backup) or a change log
//!   that does not continue the cached history (an epoch missing, another commit at the cached
//!   epoch, another lineage) drops the tenant: it reloads, reads are SQL meanwhile.
//! - Single flight: one load per tenant at a time, spawned off the request path (the request
//!   that missed, and every other until the load ends, is served by SQL); one catch-up per
//!   tenant at a time, in a task of its own that a request abandoned mid-way does not stop
//!   (concurrent readers wait for it). Both run on the cache's arbiter thread, their decoding
//!   and indexing on blocking threads: loads of other tenants never wait for each other.
//! - Memory is bounded by `storage.postgres.cache_mb` ([`estimated_bytes`]): whole tenants are
//!   evicted least recently used past it; a tenant estimated larger than the budget is never
//!   cached (SQL path).
//! - A read never fails because of the cache: a tenant evicted or reloaded between a read's
//!   scope and its search is searched by SQL for the principal the scope carries (its groups
//!   included), the hits kept inside the scope (`read::Dispatch`; fallback `evicted_in_flight`).

mod catch_up;
mod load;
mod local;
mod sql;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use lru::LruCache;

use crate::acl::AuthorizationScope;
use crate::domain::Principal;
use crate::embed::Embedder;
use crate::embedded::{Engine, ShardSearch};
use crate::index::vector::VectorParams;

use super::limit::TenantLimiter;

pub use local::REWRITE_EPOCHS;

/// How a node's tenant cache is sized (`storage.postgres.cache_mb`, `cache_shards`, and the
/// embedded engine's `[index]` HNSW settings), and where its local index cache lives
/// (`cache_dir`).
#[derive(Clone, Debug)]
pub struct CacheParams {
    /// Memory for cached tenants, bytes (0: the cache is off).
    pub budget_bytes: u64,
    /// Shards of each cached tenant.
    pub shards: usize,
    /// Threads of each cached shard's actor (at most 4 whatever the cores, so that twenty
    /// cached tenants start tens of threads, not hundreds).
    pub threads_per_shard: usize,
    /// HNSW parameters of the cached shards (the dimension is the embedder's).
    pub vector: VectorParams,
    /// The local index cache's directory (`storage.postgres.cache_dir`; `None`: off): cached
    /// tenants are written there and load from there after a restart ([`local`]).
    pub local_dir: Option<PathBuf>,
    /// Disk for the local sets, bytes (`storage.postgres.cache_dir_mb`): the least recently
    /// used beyond it are removed ([`local`]).
    pub local_budget_bytes: u64,
}

/// How long a tenant estimated larger than the budget is served by SQL before it is estimated
/// again.
const TOO_LARGE_RETRY: Duration = Duration::from_secs(60);

impl CacheParams {
    /// The cache off: every read is SQL.
    pub fn off() -> Self {
        Self { budget_bytes: 0, ..Self::with_budget_mb(0) }
    }

    /// A cache of `budget_mb` MiB with the default settings otherwise (tests, benchmarks).
    pub fn with_budget_mb(budget_mb: usize) -> Self {
        let mut settings = crate::config::Settings::defaults();
        settings.storage.postgres.cache_mb = budget_mb;
        Self::from_settings(&settings)
    }

    /// The cache of `storage.postgres` with the `[index]` HNSW settings.
    pub fn from_settings(settings: &crate::config::Settings) -> Self {
        let postgres = &settings.storage.postgres;
        let shards = postgres.cache_shards.max(1);
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Self {
            budget_bytes: (postgres.cache_mb as u64).saturating_mul(1 << 20),
            shards,
            threads_per_shard: cores.div_ceil(shards).clamp(crate::index::shard::MIN_THREADS_PER_SHARD, 4),
            vector: VectorParams {
                dimension: 0,
                max_connections: settings.index.hnsw_max_connections,
                ef_construction: settings.index.hnsw_ef_construction,
                ef_search: settings.index.hnsw_ef_search,
                exact_scan_threshold: settings.index.exact_scan_threshold,
                exact_scan_max_fraction: settings.index.exact_scan_max_fraction,
            },
            local_dir: (!postgres.cache_dir.is_empty()).then(|| PathBuf::from(&postgres.cache_dir)),
            local_budget_bytes: postgres.cache_dir_mb.saturating_mul(1 << 20),
        }
    }

    /// Whether the cache is on.
    pub fn enabled(&self) -> bool {
        self.budget_bytes > 0
    }
}

/// Estimated bytes a cached tenant holds: per chunk its vector (`dimension` f32), its HNSW
/// links (2 M neighbours on layer 0 at 4 bytes, plus the upper layers' few), a fixed 400 bytes
/// of chunk struct, slot, bitmap and tantivy document overhead, and three times its text bytes
/// (the chunk's text and title, the lexical index's stored terms and postings); plus the
/// sentence vectors and layouts as stored. An estimate for the budget, not an accounting: it
/// errs high for short chunks.
pub fn estimated_bytes(chunks: u64, text_bytes: u64, extra_bytes: u64, vector: &VectorParams) -> u64 {
    let per_chunk = (vector.dimension as u64) * 4 + (vector.max_connections as u64) * 2 * 4 + 64 + 400;
    chunks.saturating_mul(per_chunk).saturating_add(text_bytes.saturating_mul(3)).saturating_add(extra_bytes)
}

/// One cached tenant: its engine, its shards' searches and what catching it up needs.
pub(super) struct Cached {
    pub(super) engine: Arc<Engine>,
    pub(super) search: Arc<ShardSearch>,
    /// Estimated bytes at load ([`estimated_bytes`]).
    bytes: u64,
    /// The database lineage it was loaded from.
    lineage: String,
    /// The commit time of the change at the cached epoch (`None` at epoch 0), held by the one
    /// catch-up in flight.
    history: Arc<tokio::sync::Mutex<Option<String>>>,
    /// The epoch of the last local set written of it (or it was loaded from), 0: none.
    saved: AtomicU64,
    /// Whether a local set of it is being written.
    saving: AtomicBool,
}

impl Cached {
    fn new(
        engine: Arc<Engine>,
        search: Arc<ShardSearch>,
        bytes: u64,
        lineage: String,
        committed: Option<String>,
    ) -> Self {
        Self {
            engine,
            search,
            bytes,
            lineage,
            history: Arc::new(tokio::sync::Mutex::new(committed)),
            saved: AtomicU64::new(0),
            saving: AtomicBool::new(false),
        }
    }
}

/// Tenant loads of one node by where they read the tenant from (the metric
/// `warrant_tenant_cache_loads_total{source}` counts the same, for every node of the process).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadSources {
    /// Loaded from the local index cache, then caught up.
    pub local: u64,
    /// Loaded from the database.
    pub database: u64,
}

/// Where a tenant stands in the cache.
enum Slot {
    /// A load is in flight (single flight).
    Loading,
    /// Ready to serve.
    Ready(Arc<Cached>),
    /// Estimated larger than the budget: SQL until then.
    TooLarge(Instant),
}

/// What a read found for its tenant.
pub(super) enum Lookup {
    /// Cached.
    Ready(Arc<Cached>),
    /// Not cached: the read takes the SQL path (the reason is counted).
    Sql(&'static str),
}

/// The tenants one node holds in memory, least recently used first out.
pub struct TenantCache {
    params: CacheParams,
    pool: Pool,
    limiter: Arc<TenantLimiter>,
    embedder: Arc<dyn Embedder>,
    lineage: String,
    slots: Mutex<LruCache<String, Slot>>,
    /// The local index cache, when `cache_dir` is set.
    local: Option<Arc<local::LocalSets>>,
    /// Loads installed, from the local set and from the database.
    loaded_local: AtomicU64,
    loaded_database: AtomicU64,
    /// The thread that runs loads and catch-ups ([`TenantCache::runner`]): an actix arbiter,
    /// whatever task the read that needs one runs in (the engines' actors and their background
    /// purges need an actix System and a local task set).
    runner: Mutex<Option<actix::Arbiter>>,
}

impl Drop for TenantCache {
    fn drop(&mut self) {
        if let Some(runner) = self.runner.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner()).take() {
            runner.stop();
        }
    }
}

impl std::fmt::Debug for TenantCache {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("TenantCache").field("budget_bytes", &self.params.budget_bytes).finish_non_exhaustive()
    }
}

impl TenantCache {
    pub(super) fn new(
        params: CacheParams,
        pool: Pool,
        limiter: Arc<TenantLimiter>,
        embedder: Arc<dyn Embedder>,
        lineage: String,
    ) -> Self {
        let local = params
            .local_dir
            .clone()
            .map(|directory| Arc::new(local::LocalSets::new(directory, params.local_budget_bytes)));
        Self {
            params,
            pool,
            limiter,
            embedder,
            lineage,
            slots: Mutex::new(LruCache::unbounded()),
            local,
            loaded_local: AtomicU64::new(0),
            loaded_database: AtomicU64::new(0),
            runner: Mutex::new(None),
        }
    }

    /// The arbiter that runs loads and catch-ups, started at first use; `None` outside an actix
    /// System (the cache then stays empty: every read is SQL) or when its thread cannot start.
    pub(super) fn runner(&self) -> Option<actix::ArbiterHandle> {
        let mut runner = self.runner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if runner.is_none() {
            actix::System::try_current()?;
            match actix::Arbiter::try_new() {
                Ok(arbiter) => *runner = Some(arbiter),
                Err(error) => {
                    tracing::warn!(%error, "the tenant cache's thread did not start; reads stay on SQL");
                    return None;
                }
            }
        }
        runner.as_ref().map(actix::Arbiter::handle)
    }

    /// Whether the cache is on.
    pub fn enabled(&self) -> bool {
        self.params.enabled()
    }

    /// Tenants cached and ready now.
    pub fn cached_tenants(&self) -> usize {
        self.lock().iter().filter(|(_, slot)| matches!(slot, Slot::Ready(_))).count()
    }

    /// Whether `tenant` is cached and ready.
    pub fn holds(&self, tenant: &str) -> bool {
        matches!(self.lock().peek(tenant), Some(Slot::Ready(_)))
    }

    /// Loads this node installed so far, by source.
    pub fn loads_by_source(&self) -> LoadSources {
        LoadSources {
            local: self.loaded_local.load(Ordering::SeqCst),
            database: self.loaded_database.load(Ordering::SeqCst),
        }
    }

    /// Estimated bytes of the ready tenants.
    pub fn bytes_held(&self) -> u64 {
        self.lock().iter().map(|(_, slot)| if let Slot::Ready(cached) = slot { cached.bytes } else { 0 }).sum()
    }

    /// The epoch of `tenant`'s cached engine, when it is cached.
    pub fn cached_epoch(&self, tenant: &str) -> Option<u64> {
        match self.lock().peek(tenant) {
            Some(Slot::Ready(cached)) => Some(cached.engine.acl().epoch()),
            _ => None,
        }
    }

    /// Drops `tenant` from the cache (it reloads at its next read).
    pub fn evict(&self, tenant: &str) {
        if let Some(Slot::Ready(_)) = self.lock().pop(tenant) {
            metrics::counter!("warrant_tenant_cache_evictions_total").increment(1);
        }
        self.publish_gauges();
    }

    /// Waits until `tenant` is no longer loading (tests and benchmarks: a load runs in the
    /// background); returns whether it is cached.
    pub async fn settled(&self, tenant: &str, within: Duration) -> bool {
        let started = Instant::now();
        loop {
            match self.lock().peek(tenant) {
                Some(Slot::Loading) => {}
                Some(Slot::Ready(_)) => return true,
                _ => return false,
            }
            if started.elapsed() > within {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The cached shards' searches of `tenant` (a bitmap scope's search); `None` when it left
    /// the cache since its scope was built.
    pub(super) fn search_of(&self, tenant: &str) -> Option<Arc<ShardSearch>> {
        match self.lock().peek(tenant) {
            Some(Slot::Ready(cached)) => Some(Arc::clone(&cached.search)),
            _ => None,
        }
    }

    /// What a read of `tenant` finds, starting its load (in the background) when it is absent.
    pub(super) fn lookup(self: &Arc<Self>, tenant: &str) -> Lookup {
        let mut slots = self.lock();
        match slots.get(tenant) {
            Some(Slot::Ready(cached)) => return Lookup::Ready(Arc::clone(cached)),
            Some(Slot::Loading) => return Lookup::Sql("loading"),
            Some(Slot::TooLarge(since)) if since.elapsed() < TOO_LARGE_RETRY => return Lookup::Sql("too_large"),
            Some(Slot::TooLarge(_)) | None => {}
        }
        slots.put(tenant.to_owned(), Slot::Loading);
        drop(slots);
        let Some(runner) = self.runner() else {
            self.abandon(tenant, false);
            return Lookup::Sql("no_actor_system");
        };
        metrics::counter!("warrant_tenant_cache_misses_total").increment(1);
        let (cache, owner) = (Arc::clone(self), tenant.to_owned());
        if !runner.spawn(async move { cache.load(owner).await }) {
            self.abandon(tenant, false);
            return Lookup::Sql("no_actor_system");
        }
        Lookup::Sql("loading")
    }

    /// Forgets `cached` as `tenant`'s entry (a catch-up could not continue its history), unless
    /// another entry replaced it already.
    pub(super) fn forget(&self, tenant: &str, cached: &Arc<Cached>) {
        let mut slots = self.lock();
        if matches!(slots.peek(tenant), Some(Slot::Ready(current)) if Arc::ptr_eq(current, cached)) {
            slots.pop(tenant);
        }
        drop(slots);
        self.publish_gauges();
    }

    /// Installs a loaded tenant, then evicts least recently used tenants until the budget holds.
    fn install(&self, tenant: &str, cached: Arc<Cached>) {
        let mut slots = self.lock();
        slots.put(tenant.to_owned(), Slot::Ready(cached));
        loop {
            let held: u64 =
                slots.iter().map(|(_, slot)| if let Slot::Ready(cached) = slot { cached.bytes } else { 0 }).sum();
            if held <= self.params.budget_bytes {
                break;
            }
            // The least recently used ready tenant other than this one.
            let victim = slots
                .iter()
                .rev()
                .find(|(name, slot)| name.as_str() != tenant && matches!(slot, Slot::Ready(_)))
                .map(|(name, _)| name.clone());
            let Some(victim) = victim else { break };
            slots.pop(&victim);
            metrics::counter!("warrant_tenant_cache_evictions_total").increment(1);
        }
        drop(slots);
        self.publish_gauges();
    }

    /// Marks a load that ended without a cached tenant.
    fn abandon(&self, tenant: &str, too_large: bool) {
        let mut slots = self.lock();
        if too_large {
            slots.put(tenant.to_owned(), Slot::TooLarge(Instant::now()));
        } else if matches!(slots.peek(tenant), Some(Slot::Loading)) {
            slots.pop(tenant);
        }
    }

    fn publish_gauges(&self) {
        let slots = self.lock();
        let (mut tenants, mut bytes) = (0_u64, 0_u64);
        for (_, slot) in slots.iter() {
            if let Slot::Ready(cached) = slot {
                tenants += 1;
                bytes += cached.bytes;
            }
        }
        metrics::gauge!("warrant_tenant_cache_bytes").set(bytes as f64);
        metrics::gauge!("warrant_tenant_cache_tenants").set(tenants as f64);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<String, Slot>> {
        // Every update is one map operation: a poisoned lock holds a consistent map.
        self.slots.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Counts a read served by the SQL path although the cache is on.
pub(super) fn count_fallback(reason: &'static str) {
    metrics::counter!("warrant_tenant_cache_fallbacks_total", "reason" => reason).increment(1);
}

impl super::PostgresBackend {
    /// The scope of `principal` for a read that found its tenant at `epoch` in the database: the
    /// cached engine's bitmap scope, caught up to at least `epoch` first, when the tenant is
    /// cached; `None` (the SQL path) when it is not, is loading, or could not be caught up.
    pub(super) async fn cached_scope(&self, principal: &Principal, epoch: u64) -> Option<AuthorizationScope> {
        let cache = &self.cache;
        if !cache.enabled() {
            return None;
        }
        let tenant = principal.tenant.as_str();
        let cached = match cache.lookup(tenant) {
            Lookup::Ready(cached) => cached,
            Lookup::Sql(reason) => {
                count_fallback(reason);
                return None;
            }
        };
        let current = cached.engine.acl().epoch();
        if current < epoch {
            if let Err(behind) = cache.catch_up(tenant, &cached, epoch).await {
                if behind.reload {
                    cache.forget(tenant, &cached);
                }
                count_fallback(behind.reason);
                return None;
            }
        } else if current > epoch {
            // Another read caught it up past this read's epoch meanwhile, or the database went
            // back (restored from a backup): its epoch now tells them apart.
            let again = self.epoch(tenant).await.ok()?;
            if again < current {
                cache.forget(tenant, &cached);
                count_fallback("epoch_went_back");
                return None;
            }
        }
        metrics::counter!("warrant_tenant_cache_hits_total").increment(1);
        // The groups too: a search whose tenant left the cache meanwhile is SQL's for this principal.
        Some(cached.engine.scope(principal).with_groups(&principal.groups))
    }

    /// This node's tenant cache.
    pub fn tenant_cache(&self) -> &Arc<TenantCache> {
        &self.cache
    }
}
