use std::time::Duration;

use super::*;
use crate::acl::AclStore;
use crate::domain::DocAcl;
use crate::replication::status::ReplicaStatus;

fn change(mutation: AclMutation) -> Vec<AclChange> {
    vec![AclChange { epoch: 0, mutation }]
}

fn reach(tenant: &str, groups: &[&str], users: &[&str]) -> Reach {
    Reach {
        tenant: tenant.into(),
        groups: groups.iter().map(|group| group.to_string()).collect(),
        users: users.iter().map(|user| user.to_string()).collect(),
    }
}

fn names(names: &[&str]) -> Vec<String> {
    names.iter().map(|name| name.to_string()).collect()
}

/// A store with `d1` of acme readable by `eng`, `ops` and the user `carol`.
fn store() -> AclStore {
    let store = AclStore::new();
    let ordinal = store.reserve_ordinals(1).unwrap().start;
    let acl = DocAcl { groups: names(&["eng", "ops"]), users: names(&["carol"]) };
    let upsert = AclMutation::Upsert {
        tenant: "acme".into(),
        doc_id: "d1".into(),
        version: 1,
        ordinal,
        title: "d1".into(),
        acl,
    };
    store.apply(vec![upsert]).unwrap();
    store
}

#[test]
fn a_change_reaches_only_the_readers_it_can_take_a_document_from() {
    let store = store();
    let before = store.load();
    let revoke = |groups: Option<&[&str]>, users: Option<&[&str]>| AclMutation::Revoke {
        tenant: "acme".into(),
        doc_id: "d1".into(),
        groups: groups.map(names),
        users: users.map(names),
    };
    // A revoke reaches the readers it removes that the document had.
    assert_eq!(reach_of(&change(revoke(Some(&["ops", "sales"]), None)), &before), [reach("acme", &["ops"], &[])]);
    assert_eq!(reach_of(&change(revoke(None, Some(&["carol"]))), &before), [reach("acme", &[], &["carol"])]);
    assert_eq!(reach_of(&change(revoke(Some(&["sales"]), Some(&[]))), &before), [], "it removes nobody");
    // Revoking every reader, deleting, or a new version reach every reader of the document.
    let everyone = [reach("acme", &["eng", "ops"], &["carol"])];
    assert_eq!(reach_of(&change(revoke(None, None)), &before), everyone);
    let delete = AclMutation::Delete { tenant: "acme".into(), doc_id: "d1".into() };
    assert_eq!(reach_of(&change(delete), &before), everyone);
    let upsert = |doc_id: &str| AclMutation::Upsert {
        tenant: "acme".into(),
        doc_id: doc_id.into(),
        version: 2,
        ordinal: 99,
        title: String::new(),
        acl: DocAcl { groups: names(&["eng"]), users: vec![] },
    };
    assert_eq!(reach_of(&change(upsert("d1")), &before), everyone);
    // A new document, a grant, or a document of another tenant take nothing from anyone.
    assert_eq!(reach_of(&change(upsert("d2")), &before), []);
    let grant =
        AclMutation::Grant { tenant: "acme".into(), doc_id: "d1".into(), groups: names(&["sales"]), users: vec![] };
    assert_eq!(reach_of(&change(grant), &before), []);
    let elsewhere = AclMutation::Delete { tenant: "globex".into(), doc_id: "d1".into() };
    assert_eq!(reach_of(&change(elsewhere), &before), []);
}

/// Regression (issue 59, item 5): a removal moved one counter per replica, so every request
/// in flight failed with `replica_stale`, in every tenant, on any revoke.
#[test]
fn a_removal_fails_only_the_requests_it_can_take_something_from() {
    let status = ReplicaStatus::new(Duration::from_secs(10));
    let alice = Principal::new("acme", "alice", ["eng"]);
    let bob = Principal::new("globex", "bob", ["eng"]);
    let carol = Principal::new("acme", "carol", ["finance"]);
    let (for_alice, for_bob, for_carol) = (status.observe(&alice), status.observe(&bob), status.observe(&carol));
    status.removed(vec![reach("globex", &["eng"], &[])]);
    assert!(status.unchanged_for(&for_alice), "another tenant's revoke failed an acme request");
    assert!(!status.unchanged_for(&for_bob), "the revoke reaches bob's group");
    status.removed(vec![reach("acme", &["ops"], &["carol"])]);
    assert!(status.unchanged_for(&for_alice), "a revoke of other readers failed alice's request");
    assert!(!status.unchanged_for(&for_carol), "the revoke names carol");
    // A request that starts after a removal is not failed by it.
    assert!(status.unchanged_for(&status.observe(&bob)));
    // A request without a principal counts every removal.
    assert!(!status.unchanged_for(&Default::default()));
    // Divergence fails every request.
    let for_alice = status.observe(&alice);
    status.mark_stale();
    assert!(!status.unchanged_for(&for_alice));
}

#[test]
fn a_request_older_than_every_removal_kept_is_failed() {
    let status = ReplicaStatus::new(Duration::from_secs(10));
    let alice = Principal::new("acme", "alice", ["eng"]);
    let observed = status.observe(&alice);
    for _ in 0..KEPT {
        status.removed(vec![reach("globex", &["eng"], &[])]);
    }
    assert!(status.unchanged_for(&observed), "every removal since is kept and none reaches alice");
    status.removed(vec![reach("globex", &["eng"], &[])]);
    assert!(!status.unchanged_for(&observed), "one it has not seen was dropped");
}
