//! The write path's rules against a recording write side and settlement: a refusal happens
//! before anything is written, and a write is acknowledged only after it settled.

use std::sync::Mutex;
use std::time::Duration;

use super::*;
use crate::retrieval::RetrievalResult;

/// What reached the write side or the settlement, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Event {
    /// An upsert of these document ids into a tenant, committed at an epoch.
    Upsert(String, Vec<String>, u64),
    /// A mutation, committed at an epoch.
    Mutate(AclMutation, u64),
    /// A settlement of (tenant, epoch) began.
    Settling(String, u64),
    /// It returned.
    Settled(String, u64),
}

type Log = Arc<Mutex<Vec<Event>>>;

/// A write side that records each write and commits it at the next epoch.
struct RecordingWriter {
    log: Log,
    epoch: Mutex<u64>,
}

impl RecordingWriter {
    fn next_epoch(&self) -> u64 {
        let mut epoch = self.epoch.lock().unwrap();
        *epoch += 1;
        *epoch
    }
}

#[async_trait]
impl WriteSide for RecordingWriter {
    async fn upsert(&self, tenant: &str, inputs: Vec<DocumentInput>) -> RetrievalResult<UpsertOutcome> {
        let acl_epoch = self.next_epoch();
        let doc_ids = inputs.iter().map(|input| input.doc_id.clone()).collect();
        self.log.lock().unwrap().push(Event::Upsert(tenant.to_owned(), doc_ids, acl_epoch));
        Ok(UpsertOutcome { acl_epoch, documents: inputs.len(), chunks: inputs.len() })
    }

    async fn mutate(&self, mutation: AclMutation) -> RetrievalResult<u64> {
        let epoch = self.next_epoch();
        self.log.lock().unwrap().push(Event::Mutate(mutation, epoch));
        Ok(epoch)
    }
}

/// A settlement that records each call and, when gated, waits for a permit of its gate (a
/// replica that has not acknowledged yet).
struct RecordingSettle {
    log: Log,
    gate: Option<Arc<tokio::sync::Semaphore>>,
}

#[async_trait]
impl Settle for RecordingSettle {
    async fn settle(&self, tenant: &str, epoch: u64) {
        self.log.lock().unwrap().push(Event::Settling(tenant.to_owned(), epoch));
        if let Some(gate) = &self.gate {
            gate.acquire().await.expect("the gate stays open").forget();
        }
        self.log.lock().unwrap().push(Event::Settled(tenant.to_owned(), epoch));
    }
}

/// Small limits: 2 documents a batch, 2 names a document and a change, 16-byte files, one
/// batch and one change in flight per tenant.
fn settings() -> Settings {
    let mut settings = Settings::defaults();
    settings.server.max_batch_documents = 2;
    settings.server.max_acl_names_per_document = 2;
    settings.server.max_acl_names_per_change = 2;
    settings.server.max_file_bytes = 16;
    settings.server.admin_document_batches_per_tenant = 1;
    settings.server.admin_acl_changes_per_tenant = 1;
    settings
}

fn service(settings: &Settings, gate: Option<Arc<tokio::sync::Semaphore>>) -> (Arc<Documents>, Log) {
    let log: Log = Arc::default();
    let writer = Arc::new(RecordingWriter { log: Arc::clone(&log), epoch: Mutex::new(0) });
    let settle = Arc::new(RecordingSettle { log: Arc::clone(&log), gate });
    (Arc::new(Documents::from_settings(settings, writer, settle)), log)
}

fn text(doc_id: &str, groups: &[&str]) -> Upload {
    Upload {
        doc_id: doc_id.into(),
        title: Some("t".into()),
        content: Content::Text("Some text.".into()),
        acl: DocAcl { groups: groups.iter().map(|group| group.to_string()).collect(), users: vec![] },
        version: None,
    }
}

fn file(doc_id: &str, bytes: &[u8]) -> Upload {
    let content = Content::File(File {
        name: format!("{doc_id}.txt"),
        bytes: bytes::Bytes::copy_from_slice(bytes),
        content_type: "text/plain".into(),
    });
    Upload { title: None, content, ..text(doc_id, &["staff"]) }
}

fn names(count: usize) -> Vec<String> {
    (0..count).map(|index| format!("n{index}")).collect()
}

#[actix_rt::test]
async fn a_refused_write_never_reaches_the_write_side_nor_its_settlement() {
    let (documents, log) = service(&settings(), None);
    let refused_upserts = [
        (vec![], "empty_batch"),
        (vec![text("a", &[]), text("b", &[]), text("c", &[])], "batch_too_large"),
        (vec![text("a", &[]), file("big", &[b'a'; 17])], "file_too_large"),
        (vec![text("a", &["g1", "g2", "g3"])], "acl_too_large"),
        (vec![text("a", &[]), file("latin1", b"caf\xe9")], "invalid_utf8"),
    ];
    for (uploads, code) in refused_upserts {
        let refused = documents.upsert("acme", uploads).await.expect_err(code);
        assert_eq!(refused.code(), code, "{refused}");
        assert!(refused.is_refusal(), "{refused}");
    }
    let revoke =
        |groups: Option<Vec<String>>, users: Option<Vec<String>>| Change::Revoke { doc_id: "a".into(), groups, users };
    let grant = |groups: Vec<String>, users: Vec<String>| Change::Grant { doc_id: "a".into(), groups, users };
    let refused_changes = [
        (grant(vec![], vec![]), "empty_grant"),
        (grant(names(2), names(1)), "acl_too_large"),
        (grant(vec![" ".into()], vec![]), "invalid_acl_name"),
        (revoke(Some(vec![]), None), "empty_revoke"),
        (revoke(None, Some(names(3))), "acl_too_large"),
        (revoke(Some(vec!["n".repeat(257)]), None), "invalid_acl_name"),
    ];
    for (change, code) in refused_changes {
        let refused = documents.change("acme", change).await.expect_err(code);
        assert_eq!(refused.code(), code, "{refused}");
    }
    assert_eq!(log.lock().unwrap().as_slice(), [], "a refused write reached the write side or settled");

    // A replica refuses every write before anything else.
    let mut replica = settings();
    replica.replica.follow = "http://127.0.0.1:9".into();
    let (replica, log) = service(&replica, None);
    let refused = replica.upsert("acme", vec![text("a", &[])]).await.expect_err("a replica");
    assert_eq!(refused.code(), "read_only_replica");
    let refused = replica.change("acme", Change::Delete { doc_id: "a".into() }).await.expect_err("a replica");
    assert_eq!((refused.code(), refused.is_refusal()), ("read_only_replica", false));
    assert_eq!(log.lock().unwrap().as_slice(), []);
}

#[actix_rt::test]
async fn every_write_is_acknowledged_only_after_its_epoch_settled() {
    let (documents, log) = service(&settings(), None);
    let outcome = documents.upsert("acme", vec![text("a", &["staff"]), file("notes", b"Parking.")]).await.unwrap();
    let epoch = documents.change("acme", Change::Delete { doc_id: "a".into() }).await.unwrap();
    assert_eq!((outcome.acl_epoch, epoch), (1, 2));
    let upserted = Event::Upsert("acme".into(), vec!["a".into(), "notes".into()], 1);
    let deleted = Event::Mutate(AclMutation::Delete { tenant: "acme".into(), doc_id: "a".into() }, 2);
    let settling = |epoch| [Event::Settling("acme".into(), epoch), Event::Settled("acme".into(), epoch)];
    let expected = [vec![upserted], settling(1).to_vec(), vec![deleted], settling(2).to_vec()].concat();
    assert_eq!(log.lock().unwrap().as_slice(), expected.as_slice());
}

#[actix_rt::test]
async fn a_revoke_waits_for_its_settlement_and_holds_its_admission_until_then() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (documents, log) = service(&settings(), Some(Arc::clone(&gate)));
    let revoking = {
        let documents = Arc::clone(&documents);
        let change = Change::Revoke { doc_id: "a".into(), groups: Some(vec!["staff".into()]), users: None };
        actix_rt::spawn(async move { documents.change("acme", change).await })
    };
    for _ in 0..200 {
        if log.lock().unwrap().len() == 2 {
            break;
        }
        actix_rt::time::sleep(Duration::from_millis(5)).await;
    }
    let revoked = AclMutation::Revoke {
        tenant: "acme".into(),
        doc_id: "a".into(),
        groups: Some(vec!["staff".into()]),
        users: None,
    };
    assert_eq!(log.lock().unwrap().as_slice(), [Event::Mutate(revoked, 1), Event::Settling("acme".into(), 1)]);
    actix_rt::time::sleep(Duration::from_millis(20)).await;
    assert!(!revoking.is_finished(), "the revoke was acknowledged before its replicas applied it");
    // Its tenant's next change is beyond the bound while it waits.
    let busy = documents.change("acme", Change::Delete { doc_id: "b".into() }).await.expect_err("at the bound");
    assert_eq!(busy.code(), "overloaded");
    gate.add_permits(2);
    assert_eq!(revoking.await.unwrap().unwrap(), 1);
    assert_eq!(log.lock().unwrap().last(), Some(&Event::Settled("acme".into(), 1)));
    documents.change("globex", Change::Delete { doc_id: "b".into() }).await.unwrap();
}
