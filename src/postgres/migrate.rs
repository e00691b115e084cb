//! The versioned migrations of the PostgreSQL backend (`migrations/*.sql`) and how they are
//! applied: each in its own transaction, under an advisory lock, recorded in
//! `warrant_migrations`, with the embedder's dimension substituted for `@DIMENSION@`.
//!
//! Invariants kept by this module: migrations are numbered 1, 2, … in order and each is applied
//! once, however many nodes start at once; the dimension is checked against what pgvector's HNSW
//! index accepts before any statement runs. From version 7 on every tenant table FORCEs
//! row-level security, which binds the migrating role too: a later migration that reads or
//! writes across tenants lifts FORCE on its tables for its own transaction (see
//! `migrations/0007_row_level_security.sql`).

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
    (7, "0007_row_level_security", include_str!("../../migrations/0007_row_level_security.sql")),
    (8, "0008_reviews", include_str!("../../migrations/0008_reviews.sql")),
    (9, "0009_layouts", include_str!("../../migrations/0009_layouts.sql")),
];

/// Largest dimension pgvector's HNSW index accepts for `vector`.
const MAX_DIMENSION: usize = 2000;

/// `warrant db migrate`: applies the pending migrations for vectors of `dimension` and returns
/// the versions it applied (empty when the database is current).
pub async fn migrate_database(params: &PostgresParams, dimension: usize) -> RetrievalResult<Vec<i32>> {
    check_dimension(dimension)?;
    let pool = build_pool(params, &super::DatabaseLimits::default(), super::tls_connector(params.ca_file.as_deref())?)?;
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
    // A migration (an index build) may run longer than a request's statement_timeout, and
    // waits for another node's migration under the lock: no deadline in this transaction.
    transaction.batch_execute("SET LOCAL statement_timeout = 0").await.map_err(database)?;
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
        let text = text.replace("@DIMENSION@", &dimension.to_string());
        // One statement at a time: Citus refuses DDL on a distributed table that arrives in a
        // string of several commands ("cannot insert multiple commands into a prepared
        // statement"), which is how a cluster distributed at an earlier version migrates forward.
        for statement in statements(&text) {
            transaction.batch_execute(statement).await.map_err(database)?;
        }
        transaction.execute(sql::RECORD_MIGRATION, &[version, name]).await.map_err(database)?;
        ran.push(*version);
    }
    transaction.commit().await.map_err(database)?;
    Ok(ran)
}

/// The statements of a migration file, in order, each without its `;`: split at the semicolons
/// outside comments (`--`, `/* */`), string literals (`'...'`), quoted identifiers (`"..."`)
/// and dollar-quoted bodies (`$$ ... $$`, `$tag$ ... $tag$`, as the functions of 0003 and 0007).
/// Empty statements (only whitespace or comments) are left out.
fn statements(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let mut statements = Vec::new();
    let (mut start, mut index) = (0, 0);
    let mut code = false; // whether the current statement holds anything but comments
    while index < bytes.len() {
        let rest = &text[index..];
        let skip = if rest.starts_with("--") {
            rest.find('\n').unwrap_or(rest.len())
        } else if rest.starts_with("/*") {
            rest.find("*/").map_or(rest.len(), |end| end + 2)
        } else if let Some(quote) = rest.chars().next().filter(|first| *first == '\'' || *first == '"') {
            code = true;
            // A doubled quote inside is an escaped one: the scan resumes after it.
            rest[1..].find(quote).map_or(rest.len(), |end| end + 2)
        } else if let Some(tag) = dollar_tag(rest) {
            code = true;
            rest[tag.len()..].find(tag).map_or(rest.len(), |end| end + 2 * tag.len())
        } else if rest.starts_with(';') {
            if code {
                statements.push(text[start..index].trim());
            }
            start = index + 1;
            code = false;
            1
        } else {
            code |= !rest.starts_with(char::is_whitespace);
            rest.chars().next().map_or(1, char::len_utf8)
        };
        index += skip;
    }
    if code {
        statements.push(text[start..].trim());
    }
    statements
}

/// The opening tag of a dollar-quoted string at the start of `text` (`$$` or `$tag$`).
fn dollar_tag(text: &str) -> Option<&str> {
    let body = text.strip_prefix('$')?;
    let end = body.find('$')?;
    let tag = &body[..end];
    let valid = tag.chars().enumerate().all(|(position, character)| {
        character == '_' || character.is_ascii_alphabetic() || (position > 0 && character.is_ascii_digit())
    });
    valid.then(|| &text[..end + 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_numbered_in_order_and_name_their_files() {
        for (index, (version, name, text)) in MIGRATIONS.iter().enumerate() {
            assert_eq!(*version as usize, index + 1, "{name}: migrations are numbered 1, 2, … without gaps");
            assert!(name.starts_with(&format!("{version:04}_")), "{name}");
            assert!(text.contains("@DIMENSION@") || index > 0, "the first migration sizes the vectors");
        }
    }

    #[test]
    fn migrations_split_into_statements_at_top_level_semicolons_only() {
        let text = "-- a comment; not a statement\nCREATE TABLE t (a text DEFAULT 'x;y''z');\n\
            CREATE FUNCTION f() RETURNS void LANGUAGE plpgsql AS $$ BEGIN PERFORM 1; END $$;\n\
            /* block; comment */ SELECT $tag$ ; $tag$, \"odd;name\" FROM t;\n-- trailing comment\n";
        assert_eq!(
            statements(text),
            [
                "-- a comment; not a statement\nCREATE TABLE t (a text DEFAULT 'x;y''z')",
                "CREATE FUNCTION f() RETURNS void LANGUAGE plpgsql AS $$ BEGIN PERFORM 1; END $$",
                "/* block; comment */ SELECT $tag$ ; $tag$, \"odd;name\" FROM t",
            ]
        );
        // Every migration: its statements joined back are the file without separators.
        for (_, name, text) in MIGRATIONS {
            let split = statements(text);
            assert!(!split.is_empty(), "{name}");
            for statement in &split {
                assert!(!statement.ends_with(';') && text.contains(statement), "{name}: {statement}");
            }
        }
        let row_level_security = statements(MIGRATIONS[6].2);
        assert!(row_level_security[0].starts_with("--") && row_level_security[0].contains("END\n$$"));
        assert_eq!(
            row_level_security.len(),
            2 + 3 * 9 + 1,
            "two functions, three statements per table, one more policy"
        );
    }

    #[test]
    fn a_dimension_pgvector_cannot_index_is_refused() {
        assert!(check_dimension(384).is_ok());
        assert!(check_dimension(0).is_err());
        assert!(check_dimension(MAX_DIMENSION + 1).is_err());
    }
}
