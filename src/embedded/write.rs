//! The write side of the [`Engine`]: batch validation, chunking, embedding, indexing, staging,
//! the durable commit and the publication of ACL changes, and their cleanup. Local writes and a
//! replica's remote changes end in the same [`Engine::publish_and_purge`] step.
//!
//! See [`super::engine`] for the write-path invariants.

use std::path::Path;
use std::sync::Arc;

use futures::future::join_all;
use roaring::RoaringBitmap;

use crate::acl::{AclError, AclMutation, AclStore};
use crate::domain::{Chunk, chunk_document};
use crate::index::IndexError;
use crate::index::shard::{IndexChunks, PurgeOrdinals, Shard};
use crate::storage::{Commit, EncodedDocument, STORE_FILE, StorageError, Store, WriteStep};

use crate::retrieval::batch::{
    BatchSentenceTexts, BatchSentences, DocumentInput, embedding_text, invalid, to_document, validate_batch,
};
use crate::retrieval::{RetrievalError, RetrievalResult, UpsertOutcome, WriteSide};

use super::batch::{BatchRows, batch_rows, off_thread};
use super::engine::{Engine, shard_of};

/// A test hook that can fail the write path before any [`WriteStep`] (deterministic crash and
/// I/O-failure tests). Returns `true` to fail at that step.
pub type FaultHook = Arc<dyn Fn(WriteStep) -> bool + Send + Sync>;

/// Attempts at an upsert whose implicit versions raced another upsert of the same document.
const MAX_UPSERT_ATTEMPTS: usize = 4;
/// Documents per staging transaction: small enough that a revoke queued behind one waits
/// milliseconds, large enough that a 500-document batch takes few fsyncs.
const STAGE_DOCUMENTS: usize = 32;

impl Engine {
    /// Installs a fault hook (tests only: deterministic failures between write-path steps).
    pub fn inject_faults(&self, hook: Option<FaultHook>) {
        *self.faults.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = hook;
    }

    fn fault(&self, step: WriteStep) -> RetrievalResult<()> {
        let hook = self.faults.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone();
        match hook {
            Some(hook) if hook(step) => Err(StorageError::Injected(step).into()),
            _ => Ok(()),
        }
    }

    /// Upserts a batch of documents into `tenant`, all or nothing.
    ///
    /// Chunking, embedding and indexing run outside the writer lock (new chunks are indexed under
    /// fresh ordinals that no scope contains yet), so a revoke never waits for another request's
    /// embedding; the lock is held only to check versions, commit and publish.
    pub async fn upsert(&self, tenant: &str, inputs: Vec<DocumentInput>) -> RetrievalResult<UpsertOutcome> {
        validate_batch(&inputs)?;
        let inputs = Arc::new(inputs);
        // Chunk boundaries and embedding texts do not depend on the version or the ordinal.
        let (provisional, texts) = {
            let (tenant, inputs, chunking) = (tenant.to_owned(), Arc::clone(&inputs), self.params.chunking);
            off_thread(inputs.len(), move || {
                let provisional: Vec<Vec<Chunk>> =
                    inputs.iter().map(|input| chunk_document(&to_document(&tenant, input, 1), 0, &chunking)).collect();
                let texts: Vec<String> = provisional.iter().flatten().map(embedding_text).collect();
                (Arc::new(provisional), texts)
            })
            .await
        };
        self.fault(WriteStep::Embed)?;
        let vectors = Arc::new(self.embed_texts(texts).await?);
        let sentences = Arc::new(self.sentence_vectors(&provisional).await?);
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.try_upsert(tenant, &inputs, &provisional, (&vectors, &sentences)).await {
                Err(RetrievalError::Acl(AclError::StaleVersion { .. } | AclError::Conflict))
                    if attempt < MAX_UPSERT_ATTEMPTS && inputs.iter().all(|input| input.version.is_none()) =>
                {
                    // Another upsert of the same document won the race; take the next version.
                    continue;
                }
                result => {
                    if result.is_ok() {
                        self.write_set_when_journals_grow();
                    }
                    return result;
                }
            }
        }
    }

    /// Starts writing an index set in the background once the shards' journals since the last
    /// one hold `storage.index_journal_max_mb` (one at a time): the journal a restart applies
    /// stays bounded, and sets are written where ingestion is, not only at checkpoints.
    fn write_set_when_journals_grow(&self) {
        use std::sync::atomic::Ordering;
        let Some(store) = &self.store else { return };
        let bytes: u64 = self.shards().iter().map(|shard| shard.journal_bytes()).sum();
        if bytes == 0 || bytes < self.params.index_journal_max_bytes || self.set_writing.swap(true, Ordering::SeqCst) {
            return;
        }
        let Some(write) = self.index_set_writer(store) else {
            self.set_writing.store(false, Ordering::SeqCst);
            return;
        };
        let writing = Arc::clone(&self.set_writing);
        tracing::info!(journal_bytes = bytes, "the index journals are large: writing an index set");
        actix_rt::spawn(async move {
            write.await;
            writing.store(false, Ordering::SeqCst);
        });
    }

    async fn try_upsert(
        &self,
        tenant: &str,
        inputs: &[DocumentInput],
        provisional: &Arc<Vec<Vec<Chunk>>>,
        (vectors, sentences): (&Arc<Vec<Vec<f32>>>, &Arc<BatchSentences>),
    ) -> RetrievalResult<UpsertOutcome> {
        let acl = self.acl();
        let snapshot = acl.load();
        let mut documents = Vec::with_capacity(inputs.len());
        for input in inputs {
            let current = snapshot.entry(tenant, &input.doc_id).map(|entry| entry.version);
            let version = match (input.version, current) {
                (Some(version), Some(current)) if version <= current => {
                    return Err(AclError::StaleVersion { doc_id: input.doc_id.clone(), current }.into());
                }
                (Some(version), _) => version,
                (None, Some(current)) => current
                    .checked_add(1)
                    .ok_or_else(|| invalid(&input.doc_id, "the version counter of this document is exhausted"))?,
                (None, None) => 1,
            };
            documents.push(to_document(tenant, input, version));
        }
        let count = u32::try_from(documents.len()).map_err(|_| invalid("", "batch too large"))?;
        let ordinals = acl.reserve_ordinals(count)?;
        let (documents, rows) = {
            let (provisional, chunking) = (Arc::clone(provisional), self.params.chunking);
            let (vectors, sentences) = (Arc::clone(vectors), Arc::clone(sentences));
            // Encoded for the store, and for replicas when a primary has any.
            let (ordinals, encode) = (ordinals.clone(), self.store.is_some() || self.sink.get().is_some());
            off_thread(documents.len(), move || {
                let rows = batch_rows(&documents, ordinals, &provisional, (&vectors, &sentences), &chunking, encode);
                (documents, rows)
            })
            .await
        };
        let BatchRows { items, encoded, chunk_count } = rows?;
        if let Some(sink) = self.sink.get() {
            // Replicas index the batch while this engine does (a hint: the change carries it too).
            sink.staged(&encoded);
        }
        let unpublished: RoaringBitmap = ordinals.clone().collect();
        let indexed = match self.fault(WriteStep::Index) {
            Ok(()) => self.index_chunks(items.into_iter().flatten().collect()).await,
            Err(error) => Err(error),
        };
        let encoded = Arc::new(encoded);
        let staged = match indexed {
            Ok(()) => self.stage(Arc::clone(&encoded)).await,
            Err(error) => Err(error),
        };
        if let Err(error) = staged {
            self.abandon(unpublished).await;
            return Err(error);
        }
        let mutations = documents
            .iter()
            .zip(ordinals)
            .map(|(document, ordinal)| AclMutation::Upsert {
                tenant: document.tenant.clone(),
                doc_id: document.doc_id.clone(),
                version: document.version,
                ordinal,
                title: document.title.clone(),
                acl: document.acl.clone(),
            })
            .collect();
        let published = if self.store.is_some() { unpublished.clone() } else { RoaringBitmap::new() };
        match self.publish(mutations, published, &encoded).await {
            Ok(epoch) => Ok(UpsertOutcome { acl_epoch: epoch, documents: documents.len(), chunks: chunk_count }),
            Err(error) => {
                self.abandon(unpublished).await;
                Err(error)
            }
        }
    }

    /// Writes a batch's rows to the store ahead of its publication, [`STAGE_DOCUMENTS`] documents
    /// per transaction, outside the writer lock: a revoke waits at most for one small
    /// transaction, never for a whole batch's commit.
    async fn stage(&self, encoded: Arc<Vec<EncodedDocument>>) -> RetrievalResult<()> {
        self.fault(WriteStep::Stage)?;
        let Some(store) = &self.store else { return Ok(()) };
        let store = Arc::clone(store);
        tokio::task::spawn_blocking(move || encoded.chunks(STAGE_DOCUMENTS).try_for_each(|piece| store.stage(piece)))
            .await
            .map_err(|error| StorageError::Io { file: STORE_FILE.into(), reason: error.to_string() })??;
        Ok(())
    }

    /// Forgets a batch that will not be published: its chunks leave the indexes and its staged
    /// rows the store (best effort: recovery deletes staged rows a failure here leaves behind).
    async fn abandon(&self, unpublished: RoaringBitmap) {
        if let Some(store) = &self.store {
            let store = Arc::clone(store);
            let ordinals = unpublished.clone();
            let unstaged = tokio::task::spawn_blocking(move || store.unstage(&ordinals)).await;
            if !matches!(unstaged, Ok(Ok(()))) {
                tracing::warn!("could not delete the rows of an abandoned batch; recovery will");
            }
        }
        self.purge_later(unpublished);
    }

    /// Applies one ACL mutation (delete, grant, revoke): committed, then published, then
    /// acknowledged. A no-op (granting what is granted, revoking what is not) changes nothing
    /// and returns the current epoch.
    pub async fn mutate(&self, mutation: AclMutation) -> RetrievalResult<u64> {
        self.publish(vec![mutation], RoaringBitmap::new(), &[]).await
    }

    /// Under the writer lock: validates `mutations` against the current snapshot, commits them
    /// (making the `published` staged rows live) as one durable transaction, then publishes, then
    /// hands the change with `documents` (the content of its upserts) to the replication sink.
    /// Nothing is visible before it is durable; a failure anywhere publishes nothing.
    async fn publish(
        &self,
        mutations: Vec<AclMutation>,
        published: RoaringBitmap,
        documents: &[EncodedDocument],
    ) -> RetrievalResult<u64> {
        let _writer = self.writer.lock().await;
        let acl = self.acl();
        let prepared = acl.prepare(mutations)?;
        if prepared.is_noop() {
            return Ok(prepared.epoch());
        }
        // Checked on the snapshot the change would publish, under the writer lock: grants in
        // flight at once cannot add up past the cap.
        prepared.check_acl_size(self.params().max_acl_names_per_document)?;
        let retired = prepared.retired();
        self.fault(WriteStep::Commit)?;
        if let Some(store) = &self.store {
            let store = Arc::clone(store);
            let changes = prepared.changes().to_vec();
            let removed = retired.clone();
            let next_ordinal = acl.next_ordinal();
            tokio::task::spawn_blocking(move || {
                store.commit(&Commit {
                    changes: &changes,
                    added: &[],
                    removed: &removed,
                    published: &published,
                    next_ordinal,
                })
            })
            .await
            .map_err(|error| StorageError::Io { file: STORE_FILE.into(), reason: error.to_string() })??;
        }
        self.fault(WriteStep::Publish)?;
        let Some(sink) = self.sink.get() else { return self.publish_and_purge(&acl, prepared) };
        let changes = prepared.changes().to_vec();
        let removes_access =
            !retired.is_empty() || changes.iter().any(|change| matches!(change.mutation, AclMutation::Revoke { .. }));
        let epoch = self.publish_and_purge(&acl, prepared)?;
        // Still under the writer lock: the sink sees changes in commit order.
        sink.committed(super::Committed {
            epoch,
            changes: &changes,
            documents,
            next_ordinal: acl.next_ordinal(),
            removes_access,
        });
        Ok(epoch)
    }

    /// A durable replica's commit of a primary's change: its log entries, the rows of the
    /// versions it adds and the removal of those it retires, in one transaction, before it is
    /// published (so a restart resumes from it).
    async fn commit_replicated(
        &self,
        acl: &AclStore,
        prepared: &crate::acl::Prepared,
        documents: &[EncodedDocument],
    ) -> RetrievalResult<()> {
        let Some(store) = &self.store else { return Ok(()) };
        if prepared.is_noop() {
            return Ok(());
        }
        let store = Arc::clone(store);
        let changes = prepared.changes().to_vec();
        let removed = prepared.retired();
        let next_ordinal = prepared.next_ordinal().map_or(acl.next_ordinal(), |next| next.max(acl.next_ordinal()));
        let documents = documents.to_vec();
        tokio::task::spawn_blocking(move || {
            store.commit(&Commit {
                changes: &changes,
                added: &documents,
                removed: &removed,
                published: &RoaringBitmap::new(),
                next_ordinal,
            })
        })
        .await
        .map_err(|error| StorageError::Io { file: STORE_FILE.into(), reason: error.to_string() })??;
        Ok(())
    }

    /// Indexes document versions a primary is about to publish (its content hint) under their
    /// ordinals, which no scope holds until the change that publishes them is applied: the
    /// replica then only publishes ([`Engine::apply_replicated`] with these as `indexed`).
    /// Returns the ordinals indexed.
    pub async fn index_ahead(&self, documents: &[EncodedDocument]) -> RetrievalResult<RoaringBitmap> {
        let dimension = self.embedder.dimension();
        let mut items = Vec::new();
        let mut ordinals = RoaringBitmap::new();
        for document in documents {
            items.extend(document.decode(dimension).map_err(|reason| invalid("", &reason))?);
            ordinals.insert(document.ordinal);
        }
        self.index_chunks(items).await?;
        Ok(ordinals)
    }

    /// Drops chunks indexed ahead whose change never came (the primary's batch failed).
    pub fn forget_ahead(&self, ordinals: RoaringBitmap) {
        self.purge_later(ordinals);
    }

    /// Makes this engine a primary that hands every committed change to `sink` (its replicas'
    /// log). Set once, before the first write; later calls are ignored.
    pub fn attach_sink(&self, sink: Arc<dyn super::ChangeSink>) {
        if self.sink.set(sink).is_err() {
            tracing::warn!("a replication sink was already attached");
        }
    }

    /// Applies one change a primary committed, with the content of the document versions it
    /// adds (a replica): its chunks are indexed under the primary's ordinals (no re-chunking, no
    /// re-embedding), then the change is published under the writer lock. A change at or below
    /// the current epoch was applied already and is skipped; one that skips an epoch is refused
    /// (`out_of_order`: the replica re-bootstraps). Returns the epoch reached.
    pub async fn apply_replicated(
        &self,
        changes: &[crate::acl::AclChange],
        documents: &[EncodedDocument],
        indexed: &RoaringBitmap,
    ) -> RetrievalResult<u64> {
        let acl = self.acl();
        let Some(epoch) = changes.first().map(|change| change.epoch) else { return Ok(acl.epoch()) };
        if epoch <= acl.epoch() {
            return Ok(acl.epoch());
        }
        if epoch != acl.epoch() + 1 || changes.iter().any(|change| change.epoch != epoch) {
            return Err(AclError::OutOfOrder { epoch }.into());
        }
        let dimension = self.embedder.dimension();
        let mut items = Vec::new();
        let mut shipped = RoaringBitmap::new();
        for document in documents {
            let decoded = document.decode(dimension).map_err(|reason| invalid("", &reason))?;
            // Indexed ahead from the primary's content hint ([`Engine::index_ahead`]).
            if !indexed.contains(document.ordinal) {
                items.extend(decoded);
            }
            shipped.insert(document.ordinal);
        }
        let upserted: RoaringBitmap = changes
            .iter()
            .filter_map(|change| match change.mutation {
                AclMutation::Upsert { ordinal, .. } => Some(ordinal),
                _ => None,
            })
            .collect();
        if upserted != shipped {
            return Err(invalid("", "a replicated change's documents do not match its upserts"));
        }
        if !items.is_empty() {
            self.index_chunks(items).await?;
        }
        let _writer = self.writer.lock().await;
        let acl = self.acl();
        let applied = match acl.prepare_remote(changes) {
            Ok(prepared) => match self.commit_replicated(&acl, &prepared, documents).await {
                Ok(()) => self.publish_and_purge(&acl, prepared),
                Err(error) => Err(error),
            },
            Err(error) => Err(error.into()),
        };
        if applied.is_err() && !shipped.is_empty() {
            self.purge_later(shipped);
        }
        applied
    }

    /// Publishes a prepared change (the new ACL snapshot is what every later scope reads) and
    /// hands the ordinals it tombstoned to the background lexical purge. The one last step of
    /// local writes and of a replica's remote changes.
    fn publish_and_purge(&self, acl: &AclStore, prepared: crate::acl::Prepared) -> RetrievalResult<u64> {
        let retired = prepared.retired();
        let epoch = acl.publish(prepared)?;
        metrics::gauge!("warrant_acl_epoch").set(epoch as f64);
        if !retired.is_empty() && self.fault(WriteStep::Purge).is_ok() {
            self.purge_later(retired);
        }
        Ok(epoch)
    }

    /// Runs `capture` while no write (upsert, mutation, remote apply) is in progress, so the ACL
    /// state and the shards it sees are consistent with each other (snapshots).
    pub async fn quiesced<T>(&self, capture: impl FnOnce(&AclStore, &[Arc<Shard>]) -> T) -> T {
        let _writer = self.writer.lock().await;
        let core = self.core.load();
        capture(&core.acl, &core.shards)
    }

    /// Applies changes received from a primary's feed (replicas), in order, under the writer
    /// lock; ordinals tombstoned by them are purged from the lexical indexes.
    pub async fn apply_remote(&self, changes: &[crate::acl::AclChange]) -> RetrievalResult<u64> {
        let _writer = self.writer.lock().await;
        let acl = self.acl();
        let prepared = acl.prepare_remote(changes)?;
        self.publish_and_purge(&acl, prepared)
    }

    /// Writes an ACL checkpoint into the store and compacts the change log (in memory and on
    /// disk) up to `compact_up_to` (at most the current epoch). Returns the checkpoint's epoch.
    pub async fn checkpoint(&self, compact_up_to: u64) -> RetrievalResult<u64> {
        let writer = self.writer.lock().await;
        let acl = self.acl();
        let snapshot = acl.load();
        let epoch = snapshot.epoch();
        let up_to = compact_up_to.min(epoch);
        if let Some(store) = &self.store {
            let store = Arc::clone(store);
            tokio::task::spawn_blocking(move || store.checkpoint(&snapshot, up_to))
                .await
                .map_err(|error| StorageError::Io { file: STORE_FILE.into(), reason: error.to_string() })??;
        }
        acl.compact(up_to);
        drop(writer);
        self.write_indexes().await;
        Ok(epoch)
    }

    /// Writes an index set next to the store of a durable engine (at every checkpoint and on
    /// graceful shutdown); does nothing for an in-memory engine. It needs no writer lock: each
    /// shard's images are taken atomically, the next ordinal is read after them (every slot's
    /// ordinal is below it), and at open every slot is resolved against the store's live rows.
    pub async fn write_indexes(&self) {
        if let Some(store) = &self.store {
            self.write_index_set(store).await;
        }
    }

    /// Writes the shards' index images next to the store; a failure is logged, the next restart
    /// then rebuilds.
    async fn write_index_set(&self, store: &Store) {
        if let Some(write) = self.index_set_writer(store) {
            write.await;
        }
    }

    /// The writing of an index set of the current shards, holding neither the engine nor its
    /// store (a background write does not keep the data directory's store open).
    pub(super) fn index_set_writer(&self, store: &Store) -> Option<impl std::future::Future<Output = ()> + use<>> {
        let directory = Path::new(store.file()).parent().map(Path::to_owned)?;
        let acl = self.acl();
        let shards = self.shards();
        let embedder = format!("{}/{}", self.embedder.name(), self.embedder.dimension());
        let journaled = self.params.index_journal;
        Some(async move {
            let written = tokio::task::spawn_blocking(move || {
                crate::storage::indexes::write(&directory, &acl, &embedder, &shards, journaled)
            })
            .await;
            match written {
                Ok(Ok(path)) => tracing::info!(set = %path.display(), "index set written"),
                Ok(Err(error)) => {
                    tracing::warn!(%error, "writing the index set failed; a restart rebuilds the indexes")
                }
                Err(error) => tracing::warn!(%error, "writing the index set failed; a restart rebuilds the indexes"),
            }
        })
    }

    async fn embed_texts(&self, texts: Vec<String>) -> RetrievalResult<Vec<Vec<f32>>> {
        let mut vectors = Vec::with_capacity(texts.len());
        for batch in texts.chunks(self.params.embed_batch.max(1)) {
            let embedded = self.embedder.embed(batch).await?;
            if embedded.len() != batch.len() {
                return Err(crate::embed::EmbedError::Shape { expected: batch.len(), got: embedded.len() }.into());
            }
            vectors.extend(embedded);
        }
        Ok(vectors)
    }

    /// The sentence vectors of every provisional chunk, in order, when the engine makes them
    /// ([`super::EngineParams::sentence_vectors`]; empty otherwise): each distinct sentence of
    /// the batch is embedded once (overlapping chunks share sentences).
    async fn sentence_vectors(&self, provisional: &[Vec<Chunk>]) -> RetrievalResult<BatchSentences> {
        if !self.params.sentence_vectors {
            return Ok(Vec::new());
        }
        let chunks: Vec<&Chunk> = provisional.iter().flatten().collect();
        let sentences = BatchSentenceTexts::of(&chunks);
        let vectors = self.embed_texts(sentences.texts.clone()).await?;
        Ok(sentences.quantize(&vectors))
    }

    async fn index_chunks(&self, items: Vec<(Chunk, Vec<f32>)>) -> RetrievalResult<()> {
        let core = self.core.load_full();
        let mut per_shard: Vec<Vec<(Chunk, Vec<f32>)>> = vec![Vec::new(); core.shards.len()];
        for (chunk, vector) in items {
            per_shard[shard_of(&chunk.tenant, &chunk.doc_id, core.shards.len())].push((chunk, vector));
        }
        let replies = join_all(
            per_shard
                .into_iter()
                .enumerate()
                .filter(|(_, items)| !items.is_empty())
                .map(|(shard, items)| core.shard_actors[shard].send(IndexChunks(items))),
        )
        .await;
        for reply in replies {
            reply.map_err(|_| IndexError::Unavailable)??;
        }
        Ok(())
    }

    /// Best-effort physical cleanup of unreadable ordinals, in the background (correctness never
    /// depends on it: the ordinals are outside every scope already).
    fn purge_later(&self, ordinals: RoaringBitmap) {
        let ordinals = Arc::new(ordinals);
        let sends: Vec<_> = self
            .core
            .load()
            .shard_actors
            .iter()
            .map(|shard| shard.send(PurgeOrdinals(Arc::clone(&ordinals))))
            .collect();
        actix_rt::spawn(async move {
            for reply in join_all(sends).await {
                if !matches!(reply, Ok(Ok(()))) {
                    tracing::warn!("lexical purge failed on a shard; unreadable chunks stay until the next purge");
                }
            }
        });
    }
}

#[async_trait::async_trait]
impl WriteSide for Engine {
    async fn upsert(&self, tenant: &str, inputs: Vec<DocumentInput>) -> RetrievalResult<UpsertOutcome> {
        Engine::upsert(self, tenant, inputs).await
    }

    async fn mutate(&self, mutation: AclMutation) -> RetrievalResult<u64> {
        Engine::mutate(self, mutation).await
    }
}
