//! Statements of the start and of every transaction's first step: migrations bookkeeping,
//! meta values, session settings, entering a tenant or the database-wide scope (invariants: [`super`]).

#[allow(unused_imports, reason = "the statements' doc links name their siblings")]
use super::*;

/// Creates the migration bookkeeping table.
pub const CREATE_MIGRATIONS: &str = "CREATE TABLE IF NOT EXISTS warrant_migrations (
    version integer PRIMARY KEY,
    name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now())";

/// Serializes migrations across nodes that start at once (transaction-scoped advisory lock).
pub const LOCK_MIGRATIONS: &str = "SELECT pg_advisory_xact_lock(5125324851::bigint)";

/// Migrations already applied.
pub const APPLIED_MIGRATIONS: &str = "SELECT version FROM warrant_migrations ORDER BY version";

/// Records an applied migration: $1 version, $2 name.
pub const RECORD_MIGRATION: &str = "INSERT INTO warrant_migrations (version, name) VALUES ($1, $2)";

/// Reads a meta value: $1 key.
pub const META_GET: &str = "SELECT value FROM warrant_meta WHERE key = $1";

/// Writes a meta value once: $1 key, $2 value.
pub const META_SET: &str = "INSERT INTO warrant_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING";

/// Sets pgvector's HNSW search parameters for the session ($1 ef_search, $2 iterative scan
/// mode, $3 max scan tuples), once per pooled connection; and plans every execution of a
/// statement for its parameters (`force_custom_plan`: the reads reuse prepared statements, and
/// a generic plan would choose between the HNSW walk and the exact path without knowing the
/// scope).
pub const SESSION_SETTINGS: &str = "SELECT set_config('hnsw.ef_search', $1, false),
    set_config('hnsw.iterative_scan', $2, false),
    set_config('hnsw.max_scan_tuples', $3, false),
    set_config('plan_cache_mode', 'force_custom_plan', false)";

/// Enters a tenant for the rest of the transaction: $1 tenant. Row-level security (migration
/// 0007) then admits that tenant's rows alone. The function SET LOCALs `warrant.tenant` (quoted
/// by the server), which Citus propagates to the workers' shards, and with it the session's
/// pgvector settings ([`SESSION_SETTINGS`]), which Citus sends the workers no other way.
pub const ENTER_TENANT: &str = "SELECT warrant_enter_tenant($1)";

/// Enters the database-wide scope for the rest of the transaction: [`HIGHEST_EPOCH`] and
/// [`ANY_TENANT`] read `warrant_tenants` through it, [`REVIEW_TENANTS`] `review_tenants`, and
/// nothing else admits it (policies `database_reads`: SELECT on those two tables only,
/// migrations 0007 and 0008; tenant ids, epochs and counts, no document text).
pub const ENTER_DATABASE: &str = "SELECT warrant_enter_database()";

/// Whether the session's role escapes row-level security (a superuser, or BYPASSRLS): the
/// backend warns at start when it does.
pub const ROLE_BYPASSES_ROW_SECURITY: &str =
    "SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user";
