//! Every SQL statement of the postgres backend, in one place for review (`docs/sql-review.md`
//! lists each with its tenant predicate, ACL check, plan on Citus and row-level security).
//!
//! Invariants: every statement is a constant; every value (tenant, user, groups, document ids,
//! query text, query vector, limits) is a bind parameter (`$n`); no statement is ever built by
//! concatenating input. Every statement on tenant data filters on `tenant_id = $1` (the Citus
//! distribution column), and both retrieval statements carry the caller's ACL check
//! (an `EXISTS` over `document_readers`) inside the same statement, so no row outside the scope ever leaves the
//! database. Behind the predicate, row-level security (migration 0007): every statement on tenant
//! data runs in a transaction that first entered its tenant ([`ENTER_TENANT`]), and the tables'
//! policies admit that tenant's rows alone, so a statement that forgot its predicate still reads
//! nothing of another tenant. The only text substituted into SQL is the embedder's dimension in
//! the migration (`@DIMENSION@`, a validated integer from the configuration).
//!
//! Split by statement family, each re-exported here so `sql::NAME` names every statement:
//! [`session`] (migrations bookkeeping, meta, session settings, entering a tenant or the
//! database), [`read`] (the retrievals, document reads, database-wide reads), [`write`] (the
//! write transactions and their kept counts) and [`reviews`] (the review queue).

pub mod read;
pub mod reviews;
pub mod session;
pub mod write;

pub use read::*;
pub use reviews::*;
pub use session::*;
pub use write::*;

#[cfg(test)]
mod tests {
    use super::*;

    /// What a statement on tenant data reads for a principal, and so which checks it must carry.
    #[derive(Clone, Copy, PartialEq)]
    enum Reads {
        /// A search: the ACL and a bound on the rows (`LIMIT $5`).
        Search,
        /// Documents or chunks for one principal: the ACL.
        ForPrincipal,
        /// Nothing for a principal (writes, totals).
        Nothing,
    }
    use Reads::{ForPrincipal, Nothing, Search};

    /// Every statement on tenant data, with what it reads.
    const TENANT_STATEMENTS: &[(&str, Reads)] = &[
        (VECTOR_SEARCH, Search),
        (VECTOR_SEARCH_EXACT, Search),
        (LEXICAL_SEARCH, Search),
        (LEXICAL_SEARCH_EXHAUSTIVE, Search),
        (POSTINGS_INSERT, Nothing),
        (POSTINGS_DELETE, Nothing),
        (POSTINGS_CHECK, Nothing),
        (COUNTS_CHECK, Nothing),
        (READER_COUNTS_ADD, Nothing),
        (LEXEME_COUNTS_ADD, Nothing),
        (READABLE_VERSIONS, ForPrincipal),
        (DOCUMENT_READ, ForPrincipal),
        (TENANT_ENSURE, Nothing),
        (TENANT_LOCK, Nothing),
        (TENANT_EPOCH, Nothing),
        (TENANT_SET_EPOCH, Nothing),
        (DOCUMENT_HEAD, Nothing),
        (DOCUMENT_UPSERT_HEAD, Nothing),
        (DOCUMENT_DELETE_HEAD, Nothing),
        (VERSION_INSERT, Nothing),
        (CHUNKS_DELETE, Nothing),
        (CHUNK_INSERT, Nothing),
        (READERS_DELETE_ALL, Nothing),
        (READERS_DELETE, Nothing),
        (READERS_INSERT, Nothing),
        (READERS_COUNT, Nothing),
        (CHANGE_INSERT, Nothing),
        (LEXICAL_TOTALS, Nothing),
        (LEXICAL_TOTALS_RECOUNTED, Nothing),
        (REVIEW_LIVE_VERSIONS, Nothing),
        (REVIEW_NEXT_SEQ, Nothing),
        (REVIEW_INSERT, Nothing),
        (REVIEW_SOURCE_INSERT, Nothing),
        (REVIEW_EVICT, Nothing),
        (REVIEW_COUNT_OUT, Nothing),
        (REVIEW_PAGE, Nothing),
        (REVIEW_GET, Nothing),
        (REVIEW_GET_SOURCES, Nothing),
        (REVIEW_GET_VERDICTS, Nothing),
        (REVIEW_MARK_REVIEWED, Nothing),
        (REVIEW_LAST_VERDICT, Nothing),
        (REVIEW_VERDICT_INSERT, Nothing),
        (REVIEW_PURGE, Nothing),
        (REVIEW_SWEEP, Nothing),
        (REVIEW_DROP_GENERATED, Nothing),
        (REVIEW_EXPIRE, Nothing),
    ];

    #[test]
    fn every_tenant_statement_is_bound_to_the_tenant_and_retrieval_carries_the_acl() {
        for (statement, reads) in TENANT_STATEMENTS {
            let bound = statement.contains("tenant_id = $1") || statement.contains("VALUES ($1");
            let inserts_from_select = statement.contains("SELECT $1,");
            assert!(bound || inserts_from_select, "not bound to the tenant: {statement}");
            if *reads != Nothing {
                assert!(statement.contains("r.tenant_id = $1"), "ACL not in the tenant: {statement}");
                assert!(statement.contains("r.name = $2") && statement.contains("ANY($3::text[])"), "{statement}");
            }
            if *reads == Search {
                assert!(statement.contains("LIMIT $5"), "unbounded: {statement}");
            }
        }
    }

    #[test]
    fn every_chunk_write_returns_what_the_lexical_totals_need() {
        for (statement, _) in TENANT_STATEMENTS {
            if statement.contains("INSERT INTO chunks") || statement.contains("DELETE FROM chunks") {
                assert!(statement.ends_with("RETURNING search_tokens"), "{statement}");
            }
        }
        assert!(TENANT_SET_EPOCH.contains("lexical_chunks = lexical_chunks + $3"));
        assert!(TENANT_SET_EPOCH.contains("lexical_tokens = lexical_tokens + $4"));
    }

    #[test]
    fn lexical_search_scores_bm25_inside_the_scope_with_tantivys_parameters() {
        let at = |text: &str| LEXICAL_SEARCH.find(text).unwrap_or_else(|| panic!("{text}"));
        // A caller's postings are filtered by its readable documents before any statistic is
        // counted over them, unless it reads every live document of the tenant.
        assert!(at("readable AS MATERIALIZED") < at("scoped AS MATERIALIZED"));
        assert!(LEXICAL_SEARCH.contains("JOIN readable ON readable.doc_id = p.doc_id"), "postings inside the scope");
        assert!(LEXICAL_SEARCH.contains("SELECT lexeme, count(*)::float8 FROM scoped GROUP BY lexeme"));
        assert!(LEXICAL_SEARCH.contains("d.documents = t.live_documents"), "the tenant's counts only for all of it");
        assert!(at("scoped AS MATERIALIZED") < at("frequencies AS MATERIALIZED"));
        // The shortcut is exact only if the common terms' bounds cannot reach the k-th score.
        assert!(LEXICAL_SEARCH.contains("SELECT sum(idf * (1.2 + 1)) FROM weights WHERE common"));
        assert!(LEXICAL_SEARCH.contains("WHERE p.score + reach.bound >= reach.floor"));
        assert!(LEXICAL_SEARCH.contains("WHERE NOT (SELECT pruned FROM exact)"));
        // Chunk rows are read for the top $5 only, each checked against the ACL.
        assert!(at("LIMIT $5") < at("JOIN chunks c"));
        assert!(at("JOIN chunks c") < at("EXISTS (SELECT 1 FROM document_readers r"));
        for statement in [LEXICAL_SEARCH, LEXICAL_SEARCH_EXHAUSTIVE] {
            // k1 = 1.2, b = 0.75, idf = ln(1 + (N - df + 0.5) / (df + 0.5)).
            assert!(statement.contains("(1.2 + 1)") && statement.contains("1.2 * (1 - 0.75 + 0.75 *"));
            assert!(statement.contains("ln(1 + (totals.chunks - "));
            assert!(statement.contains("to_tsvector('english', $4)"), "the query is analyzed like the chunks");
        }
        let matched = LEXICAL_SEARCH_EXHAUSTIVE.find("matched AS MATERIALIZED").expect("candidate set");
        let acl = LEXICAL_SEARCH_EXHAUSTIVE.find("EXISTS (SELECT 1 FROM document_readers r").expect("acl");
        assert!(matched < acl && acl < LEXICAL_SEARCH_EXHAUSTIVE.find("frequencies AS").expect("frequencies"));
    }

    #[test]
    fn every_write_returns_what_the_kept_counts_need() {
        for statement in [READERS_INSERT, READERS_DELETE, READERS_DELETE_ALL] {
            assert!(statement.ends_with("RETURNING kind::text, name"), "{statement}");
        }
        for statement in [POSTINGS_INSERT, POSTINGS_DELETE] {
            assert!(
                statement.ends_with("SELECT lexeme, count(*) FROM inserted GROUP BY lexeme")
                    || statement.ends_with("SELECT lexeme, count(*) FROM deleted GROUP BY lexeme"),
                "{statement}"
            );
        }
        assert!(TENANT_SET_EPOCH.contains("live_documents = live_documents + $5"));
    }

    #[test]
    fn no_statement_has_a_placeholder_for_text_substitution() {
        for (statement, _) in TENANT_STATEMENTS {
            for marker in ["{}", "@DIMENSION@", "%s"] {
                assert!(!statement.contains(marker), "{marker} in {statement}");
            }
        }
    }
}
