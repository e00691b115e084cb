//! The versioned migrations of the PostgreSQL backend (`migrations/*.sql`) and how they are
//! applied: each in its own transaction, under an advisory lock, recorded in
//! `warrant_migrations`, with the embedder's dimension substituted for `@DIMENSION@`.
//!
//! Invariants kept by this module: migrations are numbered in increasing order and each is
//! applied once, however many nodes start at once; the dimension is checked against what pgvector's HNSW
//! index accepts before any statement runs.

use super::{PostgresParams, build_pool, database, sql};
use crate::retrieval::{RetrievalError, RetrievalResult};
use crate::storage::StorageError;

/// The versioned migrations, in order: (version, name, SQL with `@DIMENSION@`).
pub const MIGRATIONS: &[(i32, &str, &str)] = &[
    (1, "0001_init", include_str!("../../migrations/0001_init.sql")),
    (2, "0002_readers_by_principal", include_str!("../../migrations/0002_readers_by_principal.sql")),
    (3, "0003_lexical_statistics", include_str!("../../migrations/0003_lexical_statistics.sql")),
    (4, "0004_postings", include_str!("../../migrations/0004_postings.sql")),
    (5, "0005_sentence_vectors", include_str!("../../migrations/0005_sentence_vectors.sql")),
    (6, "0006_lexical_counts", include_str!("../../migrations/0006_lexical_counts.sql")),
    // 7 is migration 0007_row_level_security (issue 46's branch), merged beside this one.
    (8, "0008_reviews", include_str!("../../migrations/0008_reviews.sql")),
];

/// Largest dimension pgvector's HNSW index accepts for `vector`.
const MAX_DIMENSION: usize = 2000;

/// `warrant db migrate`: applies the pending migrations for vectors of `dimension` and returns
/// the versions it applied (empty when the database is current).
pub async fn migrate_database(params: &PostgresParams, dimension: usize) -> RetrievalResult<Vec<i32>> {
    check_dimension(dimension)?;
    let pool = build_pool(params, super::tls_connector(params.ca_file.as_deref())?)?;
    let mut client = pool.get().await.map_err(database)?;
    migrate(&mut client, dimension).await
}

pub(super) fn check_dimension(dimension: usize) -> RetrievalResult<()> {
    if (1..=MAX_DIMENSION).contains(&dimension) {
        return Ok(());
    }
    Err(RetrievalError::Storage(StorageError::Corrupted {
        file: "postgres".into(),
        reason: format!("embedder dimension {dimension} is outside 1..={MAX_DIMENSION}"),
    }))
}

/// Applies the migrations not yet recorded in `warrant_migrations`, each in its own transaction,
/// under an advisory lock (nodes starting at once apply each migration once).
pub async fn migrate(client: &mut deadpool_postgres::Client, dimension: usize) -> RetrievalResult<Vec<i32>> {
    debug_assert!((1..=MAX_DIMENSION).contains(&dimension));
    let transaction = client.transaction().await.map_err(database)?;
    transaction.query_one(sql::LOCK_MIGRATIONS, &[]).await.map_err(database)?;
    transaction.batch_execute(sql::CREATE_MIGRATIONS).await.map_err(database)?;
    let applied: Vec<i32> =
        transaction.query(sql::APPLIED_MIGRATIONS, &[]).await.map_err(database)?.iter().map(|row| row.get(0)).collect();
    let mut ran = Vec::new();
    for (version, name, text) in MIGRATIONS {
        if applied.contains(version) {
            continue;
        }
        // The dimension is an integer from the embedder (validated above), not request input.
        let statements = text.replace("@DIMENSION@", &dimension.to_string());
        transaction.batch_execute(&statements).await.map_err(database)?;
        transaction.execute(sql::RECORD_MIGRATION, &[version, name]).await.map_err(database)?;
        ran.push(*version);
    }
    transaction.commit().await.map_err(database)?;
    Ok(ran)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_numbered_in_order_and_name_their_files() {
        let mut previous = 0;
        for (index, (version, name, text)) in MIGRATIONS.iter().enumerate() {
            assert!(*version > previous, "{name} is not after migration {previous}");
            previous = *version;
            assert!(name.starts_with(&format!("{version:04}_")), "{name}");
            assert!(text.contains("@DIMENSION@") || index > 0, "the first migration sizes the vectors");
        }
        assert_eq!(MIGRATIONS[0].0, 1);
    }

    #[test]
    fn a_dimension_pgvector_cannot_index_is_refused() {
        assert!(check_dimension(384).is_ok());
        assert!(check_dimension(0).is_err());
        assert!(check_dimension(MAX_DIMENSION + 1).is_err());
    }
}
