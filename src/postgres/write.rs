//! The backend's write path: validate → chunk → embed outside any transaction → one transaction
//! per batch ([`PostgresBackend::upsert`]) or ACL change ([`PostgresBackend::mutate`]), which
//! first locks its tenant row ([`lock_tenant`]) and ends by applying its [`TotalsChange`] to the
//! tenant's kept counts before the commit (invariants: [`super`]).

use std::collections::BTreeMap;

use pgvector::Vector;
use tokio_postgres::types::ToSql;

use crate::acl::{AclError, AclMutation};
use crate::domain::{Chunk, SentenceVectors, chunk_document};
use crate::retrieval::{
    BatchSentenceTexts, DatabaseOperation, DocumentInput, RetrievalError, RetrievalResult, UpsertOutcome,
    embedding_text, to_document, validate_batch,
};

use super::fault::{database, pooled};
use super::{PostgresBackend, sql};

/// What one write transaction changes in its tenant's kept counts: the [`LexicalTotals`]
/// (summed from the `search_tokens` the chunk inserts and deletes return), the live documents,
/// the documents each reader is granted and the chunks holding each lexeme (schema version 6),
/// applied once by [`TotalsChange::apply`] before the commit.
#[derive(Debug, Default)]
struct TotalsChange {
    chunks: i64,
    tokens: i64,
    live_documents: i64,
    /// (kind, name) -> documents granted.
    readers: BTreeMap<(String, String), i64>,
    /// lexeme -> chunks holding it.
    lexemes: BTreeMap<String, i64>,
}

impl TotalsChange {
    fn add(&mut self, rows: &[tokio_postgres::Row]) {
        self.chunks += rows.len() as i64;
        self.tokens += rows.iter().map(|row| i64::from(row.get::<_, i32>(0))).sum::<i64>();
    }

    fn remove(&mut self, rows: &[tokio_postgres::Row]) {
        self.chunks -= rows.len() as i64;
        self.tokens -= rows.iter().map(|row| i64::from(row.get::<_, i32>(0))).sum::<i64>();
    }

    /// Readers (kind, name) a statement added (`sign` 1) or removed (-1); returns how many.
    fn readers(&mut self, rows: &[tokio_postgres::Row], sign: i64) -> u64 {
        for row in rows {
            *self.readers.entry((row.get(0), row.get(1))).or_default() += sign;
        }
        rows.len() as u64
    }

    /// Chunks per lexeme (lexeme, count) a postings statement added (`sign` 1) or removed (-1).
    fn lexemes(&mut self, rows: &[tokio_postgres::Row], sign: i64) {
        for row in rows {
            *self.lexemes.entry(row.get(0)).or_default() += sign * row.get::<_, i64>(1);
        }
    }

    /// Advances the tenant's epoch and applies every kept count's change, at the end of a write
    /// transaction (under the tenant lock).
    async fn apply(
        self,
        transaction: &deadpool_postgres::Transaction<'_>,
        tenant: &str,
        epoch: i64,
    ) -> RetrievalResult<()> {
        transaction
            .execute(sql::TENANT_SET_EPOCH, &[&tenant, &epoch, &self.chunks, &self.tokens, &self.live_documents])
            .await
            .map_err(database)?;
        let (mut kinds, mut names, mut documents) = (Vec::new(), Vec::new(), Vec::new());
        for ((kind, name), change) in self.readers.into_iter().filter(|(_, change)| *change != 0) {
            kinds.push(kind);
            names.push(name);
            documents.push(change);
        }
        if !kinds.is_empty() {
            transaction
                .execute(sql::READER_COUNTS_ADD, &[&tenant, &kinds, &names, &documents])
                .await
                .map_err(database)?;
        }
        let (lexemes, chunks): (Vec<String>, Vec<i64>) =
            self.lexemes.into_iter().filter(|(_, change)| *change != 0).unzip();
        if !lexemes.is_empty() {
            transaction.execute(sql::LEXEME_COUNTS_ADD, &[&tenant, &lexemes, &chunks]).await.map_err(database)?;
        }
        Ok(())
    }
}

/// A chunk's sentence vectors as stored in `chunks.sentence_vectors`: bincode 2 (standard
/// configuration), the embedded store's encoding.
fn encode_sentence_vectors(vectors: &SentenceVectors) -> Vec<u8> {
    encode_column(vectors)
}

/// bincode of a value kept in a `bytea` column (`chunks.sentence_vectors`, `chunks.layout`).
fn encode_column<T: serde::Serialize>(value: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(value, bincode::config::standard()).expect("plain data always encodes")
}

impl PostgresBackend {
    /// The embeddings of `texts`, in order, in batches of 64.
    async fn embed_all(&self, texts: &[String]) -> RetrievalResult<Vec<Vec<f32>>> {
        let mut vectors = Vec::with_capacity(texts.len());
        for batch in texts.chunks(64) {
            let embedded = self.embedder.embed(batch).await?;
            if embedded.len() != batch.len() {
                return Err(crate::embed::EmbedError::Shape { expected: batch.len(), got: embedded.len() }.into());
            }
            vectors.extend(embedded);
        }
        Ok(vectors)
    }

    /// The encoded sentence vectors of every provisional chunk, in order (each distinct sentence
    /// of the batch embedded once), or nothing when this backend does not make them.
    async fn encoded_sentence_vectors(&self, provisional: &[Vec<Chunk>]) -> RetrievalResult<Vec<Option<Vec<u8>>>> {
        if !(self.params.sentence_vectors && self.embedder.semantic()) {
            return Ok(Vec::new());
        }
        let chunks: Vec<&Chunk> = provisional.iter().flatten().collect();
        let sentences = BatchSentenceTexts::of(&chunks);
        let vectors = self.embed_all(&sentences.texts).await?;
        Ok(sentences
            .quantize(&vectors)
            .into_iter()
            .map(|made| made.map(|vectors| encode_sentence_vectors(&vectors)))
            .collect())
    }

    /// Upserts a batch of documents into `tenant`, all or nothing, in one transaction.
    pub async fn upsert(&self, tenant: &str, inputs: Vec<DocumentInput>) -> RetrievalResult<UpsertOutcome> {
        tracing::Instrument::instrument(self.upsert_in(tenant, inputs), self.span()).await
    }

    async fn upsert_in(&self, tenant: &str, inputs: Vec<DocumentInput>) -> RetrievalResult<UpsertOutcome> {
        validate_batch(&inputs)?;
        let limit = self.params.max_acl_names_per_document;
        if let Some(input) = inputs.iter().find(|input| {
            let acl = crate::acl::normalized(&input.acl);
            acl.groups.len() + acl.users.len() > limit
        }) {
            return Err(
                AclError::TooLarge { what: format!("the access list of document {}", input.doc_id), limit }.into()
            );
        }
        let provisional: Vec<Vec<Chunk>> = inputs
            .iter()
            .map(|input| chunk_document(&to_document(tenant, input, 1), 0, &self.params.chunking))
            .collect();
        let texts: Vec<String> = provisional.iter().flatten().map(embedding_text).collect();
        let vectors = self.embed_all(&texts).await?;
        let sentence_vectors = self.encoded_sentence_vectors(&provisional).await?;
        let _permit = self.limiter.admit(tenant, DatabaseOperation::Write).await?;
        let mut client = pooled(&self.pool, DatabaseOperation::Write).await?;
        let transaction = client.transaction().await.map_err(database)?;
        let epoch = lock_tenant(&transaction, tenant).await? + 1;
        let insert_chunk = transaction.prepare(sql::CHUNK_INSERT).await.map_err(database)?;
        let insert_postings = transaction.prepare(sql::POSTINGS_INSERT).await.map_err(database)?;
        let mut vectors_left = vectors.into_iter();
        let mut sentences_left = sentence_vectors.into_iter();
        let mut chunk_count = 0;
        let mut totals = TotalsChange::default();
        for (position, (input, first_cut)) in inputs.iter().zip(&provisional).enumerate() {
            let head = transaction.query_opt(sql::DOCUMENT_HEAD, &[&tenant, &input.doc_id]).await.map_err(database)?;
            let (live, last): (Option<i64>, Option<i64>) =
                head.map_or((None, None), |row| (row.get(0), Some(row.get(1))));
            let version = match (input.version, last) {
                (Some(version), Some(current)) if version <= current as u64 => {
                    return Err(AclError::StaleVersion { doc_id: input.doc_id.clone(), current: current as u64 }.into());
                }
                (Some(version), _) => version,
                (None, Some(current)) => current as u64 + 1,
                (None, None) => 1,
            };
            let version_sql = i64::try_from(version).map_err(|_| RetrievalError::InvalidDocument {
                doc_id: input.doc_id.clone(),
                reason: "version is too large".into(),
            })?;
            let ordinal: i64 = transaction.query_one(sql::NEXT_DOC_ORDINAL, &[]).await.map_err(database)?.get(0);
            let doc_ordinal = u32::try_from(ordinal).map_err(|_| AclError::Exhausted { what: "document ordinals" })?;
            let document = to_document(tenant, input, version);
            let chunks = chunk_document(&document, doc_ordinal, &self.params.chunking);
            debug_assert_eq!(chunks.len(), first_cut.len());
            transaction
                .execute(sql::DOCUMENT_UPSERT_HEAD, &[&tenant, &input.doc_id, &version_sql])
                .await
                .map_err(database)?;
            transaction
                .execute(sql::VERSION_INSERT, &[&tenant, &input.doc_id, &version_sql, &ordinal, &input.title, &epoch])
                .await
                .map_err(database)?;
            if live.is_none() {
                // Not live: no chunk, hence no posting, to replace (a delete removes them).
                totals.live_documents += 1;
            } else {
                totals.lexemes(
                    &transaction.query(sql::POSTINGS_DELETE, &[&tenant, &input.doc_id]).await.map_err(database)?,
                    -1,
                );
                totals
                    .remove(&transaction.query(sql::CHUNKS_DELETE, &[&tenant, &input.doc_id]).await.map_err(database)?);
            }
            for chunk in &chunks {
                let vector = Vector::from(vectors_left.next().unwrap_or_default());
                let sentences: Option<Vec<u8>> = sentences_left.next().flatten();
                let chunk_ordinal = chunk.ordinal as i32;
                let (start, end) = (chunk.start as i32, chunk.end as i32);
                let layout: Option<Vec<u8>> = chunk.layout.as_deref().map(encode_column);
                let parameters: [&(dyn ToSql + Sync); 13] = [
                    &tenant,
                    &chunk.doc_id,
                    &version_sql,
                    &chunk_ordinal,
                    &chunk.id.as_bytes().as_slice(),
                    &ordinal,
                    &start,
                    &end,
                    &chunk.title,
                    &chunk.text,
                    &vector,
                    &sentences,
                    &layout,
                ];
                totals.add(&transaction.query(&insert_chunk, &parameters).await.map_err(database)?);
            }
            chunk_count += chunks.len();
            totals.lexemes(
                &transaction
                    .query(&insert_postings, &[&tenant, &input.doc_id, &version_sql])
                    .await
                    .map_err(database)?,
                1,
            );
            if live.is_some() {
                totals.readers(
                    &transaction.query(sql::READERS_DELETE_ALL, &[&tenant, &input.doc_id]).await.map_err(database)?,
                    -1,
                );
            }
            add_readers(&transaction, &mut totals, tenant, &input.doc_id, &input.acl.groups, &input.acl.users).await?;
            let position = position as i32;
            transaction
                .execute(
                    sql::CHANGE_INSERT,
                    &[
                        &tenant,
                        &epoch,
                        &position,
                        &self.lineage,
                        &"upsert",
                        &input.doc_id,
                        &Some(version_sql),
                        &input.acl.groups,
                        &input.acl.users,
                    ],
                )
                .await
                .map_err(database)?;
        }
        totals.apply(&transaction, tenant, epoch).await?;
        transaction.commit().await.map_err(database)?;
        Ok(UpsertOutcome { acl_epoch: epoch as u64, documents: inputs.len(), chunks: chunk_count })
    }

    /// Applies one ACL mutation (delete, grant, revoke) in one transaction and returns after its
    /// commit. A no-op (granting what is granted, revoking what is not) returns the current epoch.
    pub async fn mutate(&self, mutation: AclMutation) -> RetrievalResult<u64> {
        tracing::Instrument::instrument(self.mutate_in(mutation), self.span()).await
    }

    async fn mutate_in(&self, mutation: AclMutation) -> RetrievalResult<u64> {
        let (tenant, doc_id) = match &mutation {
            AclMutation::Delete { tenant, doc_id }
            | AclMutation::Grant { tenant, doc_id, .. }
            | AclMutation::Revoke { tenant, doc_id, .. } => (tenant.as_str(), doc_id.as_str()),
            AclMutation::Upsert { .. } => {
                return Err(RetrievalError::InvalidDocument {
                    doc_id: String::new(),
                    reason: "upserts go through PostgresBackend::upsert".into(),
                });
            }
        };
        let _permit = self.limiter.admit(tenant, DatabaseOperation::Write).await?;
        let mut client = pooled(&self.pool, DatabaseOperation::Write).await?;
        let transaction = client.transaction().await.map_err(database)?;
        let current = lock_tenant(&transaction, tenant).await?;
        let head = transaction.query_opt(sql::DOCUMENT_HEAD, &[&tenant, &doc_id]).await.map_err(database)?;
        let live: Option<i64> = head.and_then(|row| row.get(0));
        let Some(version) = live else {
            return Err(AclError::UnknownDocument { doc_id: doc_id.to_owned() }.into());
        };
        let no_names: Vec<String> = Vec::new();
        let mut totals = TotalsChange::default();
        let (kind, groups, users, changed) = match &mutation {
            AclMutation::Delete { .. } => {
                totals.lexemes(
                    &transaction.query(sql::POSTINGS_DELETE, &[&tenant, &doc_id]).await.map_err(database)?,
                    -1,
                );
                totals.remove(&transaction.query(sql::CHUNKS_DELETE, &[&tenant, &doc_id]).await.map_err(database)?);
                totals.readers(
                    &transaction.query(sql::READERS_DELETE_ALL, &[&tenant, &doc_id]).await.map_err(database)?,
                    -1,
                );
                transaction.execute(sql::DOCUMENT_DELETE_HEAD, &[&tenant, &doc_id]).await.map_err(database)?;
                totals.live_documents -= 1;
                ("delete", &no_names, &no_names, 1)
            }
            AclMutation::Grant { groups, users, .. } => {
                let added = add_readers(&transaction, &mut totals, tenant, doc_id, groups, users).await?;
                let readers: i64 =
                    transaction.query_one(sql::READERS_COUNT, &[&tenant, &doc_id]).await.map_err(database)?.get(0);
                let limit = self.params.max_acl_names_per_document;
                if readers as u64 > limit as u64 {
                    transaction.rollback().await.map_err(database)?;
                    return Err(
                        AclError::TooLarge { what: format!("the access list of document {doc_id}"), limit }.into()
                    );
                }
                ("grant", groups, users, added)
            }
            AclMutation::Revoke { groups: None, users: None, .. } => {
                let removed = totals.readers(
                    &transaction.query(sql::READERS_DELETE_ALL, &[&tenant, &doc_id]).await.map_err(database)?,
                    -1,
                );
                ("revoke", &no_names, &no_names, removed)
            }
            AclMutation::Revoke { groups, users, .. } => {
                let mut removed = 0;
                for (kind, names) in [("g", groups), ("u", users)] {
                    if let Some(names) = names {
                        let kind = kind_code(kind);
                        removed += totals.readers(
                            &transaction
                                .query(sql::READERS_DELETE, &[&tenant, &doc_id, &kind, names])
                                .await
                                .map_err(database)?,
                            -1,
                        );
                    }
                }
                ("revoke", groups.as_ref().unwrap_or(&no_names), users.as_ref().unwrap_or(&no_names), removed)
            }
            AclMutation::Upsert { .. } => unreachable!("rejected above"),
        };
        if changed == 0 {
            transaction.rollback().await.map_err(database)?;
            return Ok(current as u64);
        }
        let epoch = current + 1;
        transaction
            .execute(
                sql::CHANGE_INSERT,
                &[&tenant, &epoch, &0_i32, &self.lineage, &kind, &doc_id, &Some(version), groups, users],
            )
            .await
            .map_err(database)?;
        totals.apply(&transaction, tenant, epoch).await?;
        transaction.commit().await.map_err(database)?;
        Ok(epoch as u64)
    }
}

fn kind_code(kind: &str) -> i8 {
    kind.as_bytes()[0] as i8
}

/// Enters `tenant` (row-level security admits its rows alone for the rest of the transaction),
/// creates its row if absent and locks it; returns its epoch. The first statements of every write
/// transaction.
async fn lock_tenant(transaction: &deadpool_postgres::Transaction<'_>, tenant: &str) -> RetrievalResult<i64> {
    transaction.query_one(sql::ENTER_TENANT, &[&tenant]).await.map_err(database)?;
    transaction.execute(sql::TENANT_ENSURE, &[&tenant]).await.map_err(database)?;
    Ok(transaction.query_one(sql::TENANT_LOCK, &[&tenant]).await.map_err(database)?.get(0))
}

async fn add_readers(
    transaction: &deadpool_postgres::Transaction<'_>,
    totals: &mut TotalsChange,
    tenant: &str,
    doc_id: &str,
    groups: &[String],
    users: &[String],
) -> RetrievalResult<u64> {
    let mut added = 0;
    for (kind, names) in [("g", groups), ("u", users)] {
        if names.is_empty() {
            continue;
        }
        let kind = kind_code(kind);
        added += totals.readers(
            &transaction.query(sql::READERS_INSERT, &[&tenant, &doc_id, &kind, &names]).await.map_err(database)?,
            1,
        );
    }
    Ok(added)
}
