use std::time::{Duration, Instant};

use bytes::Bytes;

use super::leases::{Leases, Renewal};
use super::primary::{Behind, ReplicationLog};
use super::wire::{ChangeFrame, Frame, FrameReader, Hello, MAX_FRAME_BYTES, WireDocument, encode_frame};
use crate::config::ReplicaSync;

fn heartbeat(epoch: u64) -> Bytes {
    encode_frame(&Frame::Heartbeat { epoch })
}

/// Every epoch above `since` that the log holds, read as a stream reads it.
fn epochs_after(log: &ReplicationLog, mut since: u64) -> Result<Vec<u64>, Behind> {
    let mut epochs = Vec::new();
    while let Some((epoch, _)) = log.next_after(since)? {
        epochs.push(epoch);
        since = epoch;
    }
    Ok(epochs)
}

#[test]
fn frames_round_trip_whatever_pieces_they_arrive_in() {
    let frames = vec![
        Frame::Hello(Hello {
            session: "s".into(),
            lineage: "l".into(),
            since: 3,
            lease_ms: 2000,
            sync: "revocations".into(),
        }),
        Frame::Change(ChangeFrame {
            epoch: 4,
            mutations: br#"[{"kind":"delete","tenant":"t","doc_id":"d"}]"#.to_vec(),
            documents: vec![WireDocument {
                ordinal: 9,
                chunks: vec![1, 2],
                vectors: vec![0; 8],
                sentences: vec![],
                layouts: vec![],
            }],
            next_ordinal: 10,
            tracked: true,
            removes_access: true,
        }),
        Frame::Heartbeat { epoch: 4 },
    ];
    let bytes: Vec<u8> = frames.iter().flat_map(|frame| encode_frame(frame).to_vec()).collect();
    for piece in [1, 3, 7, bytes.len()] {
        let mut reader = FrameReader::default();
        let mut read = Vec::new();
        for part in bytes.chunks(piece) {
            reader.push(part);
            while let Some(frame) = reader.next_frame().unwrap() {
                read.push(frame);
            }
        }
        assert_eq!(read, frames, "pieces of {piece}");
    }
    let Frame::Change(change) = &frames[1] else { unreachable!() };
    let (changes, documents) = change.clone().decode().unwrap();
    assert_eq!(changes[0].epoch, 4);
    assert_eq!(documents[0].ordinal, 9);
}

#[test]
fn an_oversized_or_malformed_frame_is_refused() {
    let mut reader = FrameReader::default();
    reader.push(&((MAX_FRAME_BYTES + 1) as u32).to_le_bytes());
    assert!(reader.next_frame().is_err());
    let mut reader = FrameReader::default();
    reader.push(&3u32.to_le_bytes());
    reader.push(&[250, 250, 250]);
    assert!(reader.next_frame().is_err());
}

#[test]
fn the_log_keeps_its_bytes_bounded_and_says_who_fell_behind() {
    let log = ReplicationLog::new(
        10,
        3 * heartbeat(0).len(),
        ReplicaSync::Revocations,
        Duration::from_secs(2),
        Duration::from_millis(250),
    );
    assert_eq!(epochs_after(&log, 10), Ok(vec![]));
    assert_eq!(epochs_after(&log, 9), Err(Behind { floor: 10 }));
    for epoch in 11..=15 {
        log.push(epoch, heartbeat(epoch));
    }
    assert!(log.bytes() <= 3 * heartbeat(0).len());
    assert_eq!(log.floor(), 12);
    assert_eq!(epochs_after(&log, 11), Err(Behind { floor: 12 }));
    assert_eq!(epochs_after(&log, 12), Ok(vec![13, 14, 15]));
    assert_eq!(log.next_after(13).unwrap().map(|(epoch, _)| epoch), Some(14));
    assert_eq!(log.next_after(15).unwrap(), None);
    assert_eq!(log.next_after(11), Err(Behind { floor: 12 }));
    // The newest change is kept even when it alone is over the bound.
    let big = Bytes::from(vec![0; 10 * heartbeat(0).len()]);
    log.push(16, big);
    assert_eq!(epochs_after(&log, 15), Ok(vec![16]));
    assert_eq!(log.lag(16, Instant::now()), Duration::ZERO, "nothing unacknowledged");
    assert!(log.lag(15, Instant::now() + Duration::from_secs(1)) >= Duration::from_secs(1));
    assert_eq!(log.floor(), 15);
}

#[test]
fn a_lease_is_granted_only_to_an_open_session_that_applied_every_tracked_change() {
    let start = Instant::now();
    let leases = Leases::new(Duration::from_secs(2), start);
    let session = leases.open("replica-1", 5, start);
    assert_eq!(leases.renew("replica-1", &session, 5, start), Renewal::Granted(Duration::from_secs(2)));
    leases.track(7, ["acme"]);
    assert_eq!(leases.renew("replica-1", &session, 6, start), Renewal::Refused { required: 7 });
    assert_eq!(leases.renew("replica-1", &session, 7, start), Renewal::Granted(Duration::from_secs(2)));
    leases.close(&session);
    assert_eq!(leases.renew("replica-1", &session, 7, start), Renewal::Refused { required: 7 }, "stream closed");
    assert_eq!(leases.renew("replica-1", "no-such-session", 7, start), Renewal::Unknown);
}

/// Regression (issue 57): any replica's token renewed another replica's session, so a revoke
/// stopped waiting for a replica that had not applied it.
#[test]
fn a_session_is_renewed_only_by_the_replica_that_opened_it() {
    let start = Instant::now() - Duration::from_secs(10); // past the start-up grace
    let leases = Leases::new(Duration::from_secs(2), start);
    let now = Instant::now();
    let lagging = leases.open("replica-2", 1, now);
    assert_eq!(leases.renew("replica-2", &lagging, 1, now), Renewal::Granted(Duration::from_secs(2)));
    leases.track(2, ["acme"]);
    assert_eq!(leases.renew("replica-1", &lagging, 1_000_000, now), Renewal::Unknown);
    assert!(leases.pending(2, now).is_some(), "the lagging replica is still waited for");
    assert_eq!(leases.report(now)[0].applied_epoch, 1);
}

#[test]
fn waiting_ends_when_every_live_lease_acknowledged_or_ran_out() {
    let start = Instant::now() - Duration::from_secs(10); // past the start-up grace
    let leases = Leases::new(Duration::from_secs(2), start);
    let now = Instant::now();
    let a = leases.open("a", 1, now);
    let b = leases.open("b", 1, now);
    leases.renew("a", &a, 1, now);
    leases.renew("b", &b, 1, now);
    leases.track(2, ["acme"]);
    let deadline = leases.pending(2, now).expect("both leased, neither acknowledged");
    assert!(deadline <= now + Duration::from_secs(2));
    leases.renew("a", &a, 2, now);
    assert!(leases.pending(2, now).is_some(), "b still holds a lease");
    assert_eq!(leases.pending(2, now + Duration::from_secs(3)), None, "b's lease ran out");
    leases.renew("b", &b, 2, now);
    assert_eq!(leases.pending(2, now), None);
    // A session never leased is not waited for.
    leases.open("c", 0, now);
    assert_eq!(leases.pending(2, now), None);
}

#[test]
fn a_new_primary_waits_out_the_leases_a_previous_process_may_have_granted() {
    let start = Instant::now();
    let leases = Leases::new(Duration::from_secs(2), start);
    assert_eq!(leases.pending(1, start), Some(start + Duration::from_secs(2)));
    assert_eq!(leases.pending(1, start + Duration::from_secs(2)), None);
}

#[actix_rt::test]
async fn settle_returns_at_once_without_tracked_changes_and_on_acknowledgement() {
    let start = Instant::now() - Duration::from_secs(60); // past the start-up grace
    let leases = std::sync::Arc::new(Leases::new(Duration::from_secs(30), start));
    leases.settle("acme", 5).await; // nothing tracked
    let session = leases.open("a", 0, Instant::now());
    leases.renew("a", &session, 0, Instant::now());
    leases.track(1, ["acme"]);
    let waiting = {
        let leases = std::sync::Arc::clone(&leases);
        actix_rt::spawn(async move { leases.settle("acme", 1).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiting.is_finished(), "the leased session has not acknowledged");
    leases.renew("a", &session, 1, Instant::now());
    tokio::time::timeout(Duration::from_secs(5), waiting).await.expect("acknowledged").unwrap();
}

/// Regression (issue 59, item 6): under `revocations` a write waited for every tracked change
/// below its epoch, so an upsert or a grant of one tenant waited out a dead replica's lease
/// behind another tenant's revoke.
#[actix_rt::test]
async fn a_write_never_waits_behind_another_tenants_tracked_change() {
    let start = Instant::now() - Duration::from_secs(60); // past the start-up grace
    let leases = std::sync::Arc::new(Leases::new(Duration::from_secs(30), start));
    let dead = leases.open("a", 0, Instant::now());
    leases.renew("a", &dead, 0, Instant::now());
    leases.track(1, ["acme"]);
    // A later write of another tenant (its epoch above the revoke's) returns at once.
    tokio::time::timeout(Duration::from_secs(5), leases.settle("globex", 2)).await.expect("globex waited for acme");
    // The tenant's own later writes (and a no-op at the current epoch) still wait for it.
    let waiting = {
        let leases = std::sync::Arc::clone(&leases);
        actix_rt::spawn(async move { leases.settle("acme", 3).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiting.is_finished(), "acme's own later write waits for its revoke");
    leases.renew("a", &dead, 1, Instant::now());
    tokio::time::timeout(Duration::from_secs(5), waiting).await.expect("acknowledged").unwrap();
}

#[test]
fn settled_tracked_epochs_are_forgotten_once_every_live_lease_acknowledged_them() {
    let start = Instant::now() - Duration::from_secs(60); // past the start-up grace
    let leases = Leases::new(Duration::from_secs(30), start);
    let session = leases.open("a", 0, Instant::now());
    leases.renew("a", &session, 0, Instant::now());
    leases.track(1, ["acme"]);
    leases.track(2, ["globex"]);
    assert_eq!(leases.tracked().len(), 2, "nothing acknowledged yet");
    leases.renew("a", &session, 2, Instant::now());
    leases.track(3, ["acme"]);
    assert_eq!(leases.tracked(), [("acme".to_owned(), vec![3])]);
}
