use super::*;
use crate::domain::Principal;

fn upsert(store: &AclStore, tenant: &str, doc: &str, version: u64, groups: &[&str]) -> DocOrdinal {
    let ordinal = store.reserve_ordinals(1).unwrap().start;
    store
        .apply(vec![AclMutation::Upsert {
            tenant: tenant.into(),
            doc_id: doc.into(),
            version,
            ordinal,
            title: doc.into(),
            acl: DocAcl { groups: groups.iter().map(|g| g.to_string()).collect(), users: vec![] },
        }])
        .unwrap();
    ordinal
}

#[test]
fn scope_is_tenant_and_group_bound() {
    let store = AclStore::new();
    let a = upsert(&store, "acme", "d1", 1, &["eng"]);
    let b = upsert(&store, "globex", "d1", 1, &["eng"]);
    let scope = store.load().scope_for(&Principal::new("acme", "u", ["eng"]));
    assert!(scope.allows(a));
    assert!(!scope.allows(b));
    assert_eq!(scope.epoch(), 2);
}

#[test]
fn upsert_tombstones_the_previous_version() {
    let store = AclStore::new();
    let old = upsert(&store, "acme", "d1", 1, &["eng"]);
    let new = upsert(&store, "acme", "d1", 2, &["eng"]);
    let snapshot = store.load();
    let principal = Principal::new("acme", "u", ["eng"]);
    assert!(!snapshot.allows(&principal, old));
    assert!(snapshot.allows(&principal, new));
    assert!(snapshot.is_tombstoned(old));
}

#[test]
fn revoke_without_lists_removes_everyone_and_failed_batch_changes_nothing() {
    let store = AclStore::new();
    let ordinal = upsert(&store, "acme", "d1", 1, &["eng", "ops"]);
    let before = store.epoch();
    let failed = store.apply(vec![
        AclMutation::Revoke { tenant: "acme".into(), doc_id: "d1".into(), groups: None, users: None },
        AclMutation::Delete { tenant: "acme".into(), doc_id: "missing".into() },
    ]);
    assert_eq!(failed, Err(AclError::UnknownDocument { doc_id: "missing".into() }));
    assert_eq!(store.epoch(), before);
    assert!(store.load().allows(&Principal::new("acme", "u", ["ops"]), ordinal));
    store
        .apply(vec![AclMutation::Revoke { tenant: "acme".into(), doc_id: "d1".into(), groups: None, users: None }])
        .unwrap();
    assert!(!store.load().allows(&Principal::new("acme", "u", ["ops"]), ordinal));
    assert_eq!(store.changes_since(before).unwrap().len(), 1);
}

#[test]
fn no_op_grants_and_revokes_neither_bump_the_epoch_nor_grow_the_log() {
    let store = AclStore::new();
    upsert(&store, "acme", "d1", 1, &["eng"]);
    let epoch = store.epoch();
    let log = store.log().len();
    let grant_again =
        AclMutation::Grant { tenant: "acme".into(), doc_id: "d1".into(), groups: vec!["eng".into()], users: vec![] };
    let revoke_absent = AclMutation::Revoke {
        tenant: "acme".into(),
        doc_id: "d1".into(),
        groups: Some(vec!["sales".into()]),
        users: Some(vec![]),
    };
    assert_eq!(store.apply(vec![grant_again]), Ok(epoch));
    assert_eq!(store.apply(vec![revoke_absent]), Ok(epoch));
    assert_eq!((store.epoch(), store.log().len()), (epoch, log));
}

#[test]
fn compacted_changes_are_refused_not_silently_skipped() {
    let store = AclStore::new();
    upsert(&store, "acme", "d1", 1, &["eng"]);
    upsert(&store, "acme", "d2", 1, &["eng"]);
    upsert(&store, "acme", "d3", 1, &["eng"]);
    store.compact(2);
    assert_eq!(store.changes_since(1), Err(AclError::Compacted { since: 1, floor: 2 }));
    assert_eq!(store.changes_since(2).unwrap().len(), 1);
    assert_eq!(store.log_floor(), 2);
}

#[test]
fn a_batch_shares_untouched_entries_and_copies_the_one_it_changes() {
    let store = AclStore::new();
    upsert(&store, "acme", "d1", 1, &["eng"]);
    upsert(&store, "acme", "d2", 1, &["eng"]);
    let before = store.load();
    let grant =
        AclMutation::Grant { tenant: "acme".into(), doc_id: "d1".into(), groups: vec!["ops".into()], users: vec![] };
    store.apply(vec![grant]).unwrap();
    let after = store.load();
    let (old, new) = (&before.tenants["acme"].entries, &after.tenants["acme"].entries);
    assert!(Arc::ptr_eq(&old["d2"], &new["d2"]), "an entry the batch does not touch is shared");
    assert!(!Arc::ptr_eq(&old["d1"], &new["d1"]), "the granted entry is a copy");
    assert_eq!(before.entry("acme", "d1").unwrap().acl.groups, ["eng"], "the published snapshot is unchanged");
    assert_eq!(after.entry("acme", "d1").unwrap().acl.groups, ["eng", "ops"]);
}

#[test]
fn counters_never_overflow() {
    let store = AclStore::restore(AclSnapshot::default(), Vec::new(), u32::MAX - 1, new_lineage());
    assert_eq!(store.reserve_ordinals(1), Ok(u32::MAX - 1..u32::MAX));
    assert_eq!(store.reserve_ordinals(1), Err(AclError::Exhausted { what: "document ordinals" }));
    assert_eq!(store.next_ordinal(), u32::MAX, "a refused reservation changes nothing");
    let exhausted = AclSnapshot { epoch: u64::MAX, ..AclSnapshot::default() };
    let store = AclStore::restore(exhausted, Vec::new(), 0, new_lineage());
    let upsert = AclMutation::Upsert {
        tenant: "acme".into(),
        doc_id: "d".into(),
        version: 1,
        ordinal: 0,
        title: String::new(),
        acl: DocAcl::default(),
    };
    assert_eq!(store.apply(vec![upsert]), Err(AclError::Exhausted { what: "acl epochs" }));
}
