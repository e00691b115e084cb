//! The pool's connections shared fairly between tenants: at most `tenant_connections` of them in
//! flight for one tenant, so that a tenant whose statements hang (its Citus worker frozen or
//! partitioned, a lock held) cannot take every connection and fail the tenants on healthy
//! workers too (issue 59: a frozen worker's tenants filled both nodes' 16-connection pools in
//! about 7 s, and then 34 of 53 reads of a tenant on a healthy worker got 503).
//!
//! Invariants:
//! - A tenant holds at most `limit` permits; a request that finds none free waits at most `wait`
//!   (the pool wait) and is then refused ([`DatabaseCause::Busy`]: 503 `overloaded` with
//!   `Retry-After`), counted in `warrant_postgres_tenant_refusals_total`.
//! - A permit is held for as long as the connection it admitted (by the [`cancel::Reader`] or
//!   the write transaction), and released on drop whatever the outcome.
//! - A tenant's entry lives only while one of its permits does: the map holds the tenants with
//!   requests in flight, never every tenant ever seen.
//!
//! [`cancel::Reader`]: super::cancel::Reader

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::retrieval::{DatabaseCause, DatabaseOperation, RetrievalError, RetrievalResult};

/// Per-tenant bound on the connections in flight.
#[derive(Debug)]
pub struct TenantLimiter {
    limit: usize,
    wait: Duration,
    tenants: Arc<Mutex<HashMap<String, Arc<Semaphore>>>>,
}

/// A tenant's admission: one connection's worth, released when dropped.
#[derive(Debug)]
pub struct TenantPermit {
    tenant: String,
    semaphore: Arc<Semaphore>,
    permit: Option<OwnedSemaphorePermit>,
    limit: usize,
    tenants: Arc<Mutex<HashMap<String, Arc<Semaphore>>>>,
}

impl TenantLimiter {
    /// At most `limit` (at least 1) connections in flight per tenant, waiting at most `wait` for
    /// one.
    pub fn new(limit: usize, wait: Duration) -> Self {
        Self { limit: limit.max(1), wait, tenants: Arc::default() }
    }

    /// The bound per tenant.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// A permit for one of `tenant`'s connections, or [`DatabaseCause::Busy`] once `wait` has
    /// passed with the tenant's `limit` all held (`operation` names what was refused).
    pub async fn admit(&self, tenant: &str, operation: DatabaseOperation) -> RetrievalResult<TenantPermit> {
        self.admit_many(tenant, 1, operation).await
    }

    /// Permits for `count` of `tenant`'s connections taken at once (at most the bound): a
    /// request that needs two connections together (a retrieval's lexical and vector searches)
    /// never holds one while it waits for the other, which under a small share would let a
    /// few such requests block each other until the wait runs out.
    pub async fn admit_many(
        &self,
        tenant: &str,
        count: usize,
        operation: DatabaseOperation,
    ) -> RetrievalResult<TenantPermit> {
        let count = count.clamp(1, self.limit) as u32;
        let semaphore = {
            let mut tenants = self.tenants.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            Arc::clone(tenants.entry(tenant.to_owned()).or_insert_with(|| Arc::new(Semaphore::new(self.limit))))
        };
        // The permit's guard exists before the wait, so a refused or abandoned wait still removes
        // an entry it alone kept.
        let mut admitted = TenantPermit {
            tenant: tenant.to_owned(),
            semaphore,
            permit: None,
            limit: self.limit,
            tenants: Arc::clone(&self.tenants),
        };
        // A statement of its own: the wait's handle of the semaphore is gone before the guard's
        // drop counts the handles.
        let acquired = tokio::time::timeout(self.wait, Arc::clone(&admitted.semaphore).acquire_many_owned(count)).await;
        match acquired {
            Ok(Ok(permit)) => {
                admitted.permit = Some(permit);
                Ok(admitted)
            }
            // Never closed; a closed semaphore would be a refusal all the same.
            Ok(Err(_)) | Err(_) => {
                metrics::counter!("warrant_postgres_tenant_refusals_total").increment(1);
                Err(RetrievalError::Database { operation, cause: DatabaseCause::Busy })
            }
        }
    }

    /// Tenants with a permit held or awaited (for tests and `/metrics`).
    pub fn tenants_in_flight(&self) -> usize {
        self.tenants.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }
}

impl Drop for TenantPermit {
    fn drop(&mut self) {
        drop(self.permit.take());
        let mut tenants = self.tenants.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // The map's handle and this one alone, and every permit back: nobody holds or awaits one.
        if Arc::strong_count(&self.semaphore) == 2 && self.semaphore.available_permits() == self.limit {
            tenants.remove(&self.tenant);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(limit: usize) -> TenantLimiter {
        TenantLimiter::new(limit, Duration::from_millis(50))
    }

    /// Issue 59: one tenant's hung statements took every pooled connection. Its share is
    /// bounded; past it the tenant is refused `overloaded` while another tenant is admitted.
    #[tokio::test]
    async fn a_tenant_beyond_its_share_is_refused_and_another_tenant_is_admitted() {
        let limiter = limiter(2);
        let first = limiter.admit("slow", DatabaseOperation::Read).await.expect("first");
        let second = limiter.admit("slow", DatabaseOperation::Read).await.expect("second");
        let refused = limiter.admit("slow", DatabaseOperation::Write).await.expect_err("beyond the share");
        assert!(matches!(
            refused,
            RetrievalError::Database { operation: DatabaseOperation::Write, cause: DatabaseCause::Busy }
        ));
        assert_eq!(refused.code(), "overloaded");
        let other = limiter.admit("healthy", DatabaseOperation::Read).await.expect("another tenant is admitted");
        let both = limiter.admit_many("pair", 3, DatabaseOperation::Read).await.expect("at most the bound is taken");
        assert!(limiter.admit("pair", DatabaseOperation::Read).await.is_err(), "both permits held together");
        drop(both);
        drop(first);
        let again = limiter.admit("slow", DatabaseOperation::Read).await.expect("a released permit is reused");
        drop((second, again, other));
        assert_eq!(limiter.tenants_in_flight(), 0, "no tenant entry outlives its permits");
    }

    /// A waiter is admitted as soon as a permit is released within the wait.
    #[tokio::test]
    async fn a_waiter_is_admitted_when_a_permit_is_released_within_the_wait() {
        let limiter = Arc::new(TenantLimiter::new(1, Duration::from_secs(5)));
        let held = limiter.admit("acme", DatabaseOperation::Read).await.expect("held");
        let waiter = {
            let limiter = Arc::clone(&limiter);
            tokio::spawn(async move { limiter.admit("acme", DatabaseOperation::Read).await.map(drop) })
        };
        tokio::task::yield_now().await;
        drop(held);
        waiter.await.expect("joined").expect("admitted once released");
        assert_eq!(limiter.tenants_in_flight(), 0);
    }
}
