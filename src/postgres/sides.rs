//! The postgres backend as the layers above see it: [`ReadSide`] and [`WriteSide`], so `warrant
//! serve` runs on it exactly as on the embedded engine. Every read for a principal is one
//! statement with the tenant predicate and the ACL check inside it ([`sql`]), in a transaction
//! that entered the principal's tenant (row-level security); nothing is cached across requests,
//! so a change any node committed is seen by this node's next statement.

use std::sync::Arc;

use async_trait::async_trait;

use crate::acl::{AclMutation, AuthorizationScope};
use crate::domain::{Chunk, ChunkId, Principal};
use crate::retrieval::{
    Authorization, DocumentInput, DocumentView, ReadPath, ReadSide, ReadableVersions, RetrievalResult, UpsertOutcome,
    WriteSide,
};

use super::cancel::{Entered, Reader};
use super::{PostgresBackend, sql};

impl PostgresBackend {
    /// A reader whose statements see `tenant`'s rows alone.
    pub(super) async fn tenant_reader(&self, tenant: &str) -> RetrievalResult<Reader> {
        let entered = Entered::Tenant(tenant.to_owned());
        Reader::checkout(&self.pool, &self.tls, Some(&self.limiter), entered, self.limits.read_bound()).await
    }

    /// The tenant's current ACL epoch (0 for a tenant never written).
    async fn tenant_epoch(&self, tenant: &str) -> RetrievalResult<u64> {
        let rows = self.tenant_reader(tenant).await?.query(sql::TENANT_EPOCH, &[&tenant]).await?;
        Ok(rows.first().map_or(0, |row| row.get::<_, i64>(0) as u64))
    }

    /// Whether no tenant has written to the database yet (the demo corpus goes only into an
    /// empty one): database-wide ([`sql::ANY_TENANT`]).
    pub async fn is_empty(&self) -> RetrievalResult<bool> {
        let mut reader =
            Reader::checkout(&self.pool, &self.tls, Some(&self.limiter), Entered::Database, self.limits.read_bound())
                .await?;
        let any: bool = reader.query_one(sql::ANY_TENANT, &[]).await?.get(0);
        Ok(!any)
    }
}

#[async_trait]
impl ReadSide for PostgresBackend {
    /// One router statement for the tenant's epoch, then: the cached engine's bitmap scope,
    /// caught up to that epoch first, when the tenant is cached ([`super::cache`]); otherwise the
    /// principal with the epoch, which the database evaluates inside every statement.
    async fn scope(&self, principal: &Principal) -> RetrievalResult<AuthorizationScope> {
        let epoch = self.tenant_epoch(&principal.tenant).await?;
        if let Some(scope) = self.cached_scope(principal, epoch).await {
            return Ok(scope);
        }
        Ok(AuthorizationScope::for_principal(principal, epoch))
    }

    fn read_path(&self) -> Arc<ReadPath> {
        Arc::clone(PostgresBackend::read_path(self))
    }

    /// One statement: which of the chunks' documents have a live version the principal may read
    /// ([`sql::READABLE_VERSIONS`]); a chunk of any other version is not authorized.
    async fn authorization(
        &self,
        principal: &Principal,
        chunks: &[Arc<Chunk>],
    ) -> RetrievalResult<Arc<dyn Authorization>> {
        let mut doc_ids: Vec<&str> =
            chunks.iter().filter(|chunk| chunk.tenant == principal.tenant).map(|chunk| chunk.doc_id.as_str()).collect();
        doc_ids.sort_unstable();
        doc_ids.dedup();
        let groups: Vec<&str> = principal.groups.iter().map(String::as_str).collect();
        let mut reader = self.tenant_reader(&principal.tenant).await?;
        let row =
            reader.query_one(sql::READABLE_VERSIONS, &[&principal.tenant, &principal.user, &groups, &doc_ids]).await?;
        let epoch = row.get::<_, i64>(0) as u64;
        let readable: Vec<i64> = row.get(1);
        let readable = readable.into_iter().filter_map(|ordinal| u32::try_from(ordinal).ok());
        Ok(Arc::new(ReadableVersions::new(principal.tenant.clone(), epoch, readable)))
    }

    async fn document(&self, principal: &Principal, doc_id: &str) -> RetrievalResult<Option<DocumentView>> {
        let groups: Vec<&str> = principal.groups.iter().map(String::as_str).collect();
        let mut reader = self.tenant_reader(&principal.tenant).await?;
        let rows = reader.query(sql::DOCUMENT_READ, &[&principal.tenant, &principal.user, &groups, &doc_id]).await?;
        let Some(first) = rows.first() else { return Ok(None) };
        let version = first.get::<_, i64>(0) as u64;
        let title: String = first.get(1);
        let acl_epoch = first.get::<_, i64>(8) as u64;
        let mut chunks = Vec::with_capacity(rows.len());
        for row in &rows {
            let chunk_id: &[u8] = row.get(2);
            let id =
                ChunkId::from_bytes(chunk_id.try_into().map_err(|_| super::read_failure("chunk id is not 16 bytes"))?);
            chunks.push(Arc::new(Chunk {
                id,
                tenant: principal.tenant.clone(),
                doc_id: doc_id.to_owned(),
                doc_version: version,
                ordinal: row.get::<_, i32>(3) as u32,
                doc_ordinal: row.get::<_, i64>(4) as u32,
                start: row.get::<_, i32>(5) as usize,
                end: row.get::<_, i32>(6) as usize,
                title: title.clone(),
                text: row.get(7),
                sentence_vectors: super::decode_sentence_vectors(row.get(9))?,
                layout: super::decode_layout(row.get(10))?,
            }));
        }
        Ok(Some(DocumentView { doc_id: doc_id.to_owned(), version, title, acl_epoch, chunks }))
    }

    fn embedder_name(&self) -> &str {
        self.embedder.name()
    }

    async fn acl_state(&self) -> RetrievalResult<(u64, String)> {
        let mut reader =
            Reader::checkout(&self.pool, &self.tls, Some(&self.limiter), Entered::Database, self.limits.read_bound())
                .await?;
        let epoch: i64 = reader.query_one(sql::HIGHEST_EPOCH, &[]).await?.get(0);
        Ok((epoch as u64, self.lineage.clone()))
    }
}

#[async_trait]
impl WriteSide for PostgresBackend {
    async fn upsert(&self, tenant: &str, inputs: Vec<DocumentInput>) -> RetrievalResult<UpsertOutcome> {
        PostgresBackend::upsert(self, tenant, inputs).await
    }

    async fn mutate(&self, mutation: AclMutation) -> RetrievalResult<u64> {
        PostgresBackend::mutate(self, mutation).await
    }
}
