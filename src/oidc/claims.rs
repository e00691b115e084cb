//! Claim mapping (`[auth.claims]`): where the user, tenant, groups and roles are in a verified
//! provider token. Pure: a JSON object in, the principal's parts or the missing claim out.
//!
//! Invariants: a path is looked up by its whole name first and only then split at dots into
//! nested objects, so a URL-named claim (`https://example.com/tenant`) and a nested one
//! (`realm_access.roles`) both work; the user and the tenant must be non-blank strings, and
//! their absence is an error naming the key (never a default); groups and roles are read from an
//! array of strings or one string (other entries are ignored), and are empty when absent; with a
//! role map only the provider names it lists grant roles.

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;

use crate::config::ClaimSettings;
use crate::domain::Role;

/// The principal's parts read from a token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedClaims {
    /// User id.
    pub user: String,
    /// Tenant.
    pub tenant: String,
    /// Groups (after the prefix filter).
    pub groups: BTreeSet<String>,
    /// Roles this server knows.
    pub roles: BTreeSet<Role>,
}

/// A verified token lacks a claim the mapping needs.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("token has no usable {key} claim {path:?}")]
pub struct MissingClaim {
    /// The settings key (`auth.claims.tenant`).
    pub key: &'static str,
    /// The claim path it names.
    pub path: String,
}

/// The compiled `[auth.claims]`.
#[derive(Clone, Debug)]
pub struct ClaimMapping {
    user: String,
    tenant: Tenant,
    groups: String,
    groups_prefix: String,
    roles: String,
    /// Provider role name → warrant role; `None`: names are warrant's own.
    role_map: Option<HashMap<String, Role>>,
}

#[derive(Clone, Debug)]
enum Tenant {
    Claim(String),
    Fixed(String),
}

impl ClaimMapping {
    /// Compiles validated settings ([`crate::config::Settings::validate`] checked them).
    pub fn new(settings: &ClaimSettings) -> Self {
        let role_map = (!settings.role_map.is_empty()).then(|| {
            settings
                .role_map
                .iter()
                .filter_map(|(role, names)| Role::parse(role).map(|role| (role, names)))
                .flat_map(|(role, names)| names.iter().map(move |name| (name.clone(), role)))
                .collect()
        });
        Self {
            user: settings.user.clone(),
            tenant: if settings.fixed_tenant.is_empty() {
                Tenant::Claim(settings.tenant.clone())
            } else {
                Tenant::Fixed(settings.fixed_tenant.clone())
            },
            groups: settings.groups.clone(),
            groups_prefix: settings.groups_prefix.clone(),
            roles: settings.roles.clone(),
            role_map,
        }
    }

    /// Reads the principal's parts from a verified token's claims.
    pub fn map(&self, claims: &Value) -> Result<MappedClaims, MissingClaim> {
        let user = string_at(claims, &self.user)
            .ok_or_else(|| MissingClaim { key: "auth.claims.user", path: self.user.clone() })?;
        let tenant = match &self.tenant {
            Tenant::Fixed(tenant) => tenant.clone(),
            Tenant::Claim(path) => {
                string_at(claims, path).ok_or_else(|| MissingClaim { key: "auth.claims.tenant", path: path.clone() })?
            }
        };
        let groups = strings_at(claims, &self.groups)
            .filter_map(|group| group.strip_prefix(self.groups_prefix.as_str()))
            .filter(|group| !group.trim().is_empty())
            .map(str::to_owned)
            .collect();
        let roles = strings_at(claims, &self.roles)
            .filter_map(|name| match &self.role_map {
                Some(map) => map.get(name).copied(),
                None => Role::parse(name),
            })
            .collect();
        Ok(MappedClaims { user, tenant, groups, roles })
    }
}

/// The value at `path`: the whole path as one claim name first, else split at a dot into a
/// claim holding an object and the rest of the path inside it (each split tried left to right).
pub fn value_at<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    if path.is_empty() {
        return None;
    }
    let map = object.as_object()?;
    if let Some(value) = map.get(path) {
        return Some(value);
    }
    path.match_indices('.').find_map(|(at, _)| {
        let inner = map.get(&path[..at])?;
        value_at(inner, &path[at + 1..])
    })
}

fn string_at(claims: &Value, path: &str) -> Option<String> {
    value_at(claims, path).and_then(Value::as_str).filter(|text| !text.trim().is_empty()).map(str::to_owned)
}

/// The strings at `path`: an array's string entries, or one string; nothing when absent.
fn strings_at<'a>(claims: &'a Value, path: &str) -> impl Iterator<Item = &'a str> {
    let value = value_at(claims, path);
    let one = value.and_then(Value::as_str);
    let many = value.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str);
    one.into_iter().chain(many)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;

    fn mapping(change: impl FnOnce(&mut ClaimSettings)) -> ClaimMapping {
        let mut settings = ClaimSettings::default();
        change(&mut settings);
        ClaimMapping::new(&settings)
    }

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|item| (*item).to_owned()).collect()
    }

    #[test]
    fn defaults_read_warrants_own_claim_names() {
        let claims = json!({"sub": "alice", "tenant": "acme", "groups": ["everyone"], "roles": ["admin", "owner"]});
        let mapped = mapping(|_| {}).map(&claims).unwrap();
        assert_eq!(
            mapped,
            MappedClaims {
                user: "alice".into(),
                tenant: "acme".into(),
                groups: set(&["everyone"]),
                roles: [Role::Admin].into_iter().collect()
            }
        );
    }

    #[test]
    fn dotted_paths_reach_into_objects_and_url_named_claims_are_found_whole() {
        let claims = json!({
            "sub": "u",
            "https://example.com/org": "acme",
            "realm_access": {"roles": ["warrant-admin", "offline_access"]},
            "resource_access": {"warrant.api": {"roles": ["ops"]}},
            "a": {"b.c": {"d": "deep"}},
        });
        assert_eq!(value_at(&claims, "https://example.com/org"), Some(&json!("acme")));
        assert_eq!(value_at(&claims, "realm_access.roles"), Some(&json!(["warrant-admin", "offline_access"])));
        assert_eq!(value_at(&claims, "resource_access.warrant.api.roles"), Some(&json!(["ops"])));
        assert_eq!(value_at(&claims, "a.b.c.d"), Some(&json!("deep")));
        assert_eq!(value_at(&claims, "realm_access.missing"), None);
        assert_eq!(value_at(&claims, "sub.x"), None);
        let keycloak = mapping(|claims| {
            claims.tenant = "https://example.com/org".into();
            claims.roles = "realm_access.roles".into();
            claims.role_map = BTreeMap::from([("admin".into(), vec!["warrant-admin".into()])]);
        });
        let mapped = keycloak.map(&claims).unwrap();
        assert_eq!((mapped.tenant.as_str(), mapped.roles), ("acme", [Role::Admin].into_iter().collect()));
        let operator = mapping(|claims| {
            claims.tenant = "https://example.com/org".into();
            claims.roles = "resource_access.warrant.api.roles".into();
            claims.role_map = BTreeMap::from([("operator".into(), vec!["ops".into()])]);
        });
        assert_eq!(operator.map(&claims).unwrap().roles, [Role::Operator].into_iter().collect());
    }

    #[test]
    fn the_prefix_filter_keeps_and_strips_only_prefixed_groups() {
        let claims = json!({"sub": "u", "tenant": "t", "groups": ["/warrant/engineering", "/sales", "/warrant/", 7, "/warrant/everyone"]});
        let prefixed = mapping(|claims| claims.groups_prefix = "/warrant/".into());
        assert_eq!(prefixed.map(&claims).unwrap().groups, set(&["engineering", "everyone"]));
        assert_eq!(
            mapping(|_| {}).map(&claims).unwrap().groups.len(),
            4,
            "without a prefix every string group is kept"
        );
        let one = json!({"sub": "u", "tenant": "t", "groups": "/warrant/solo"});
        assert_eq!(prefixed.map(&one).unwrap().groups, set(&["solo"]), "a single string is one group");
        let none = json!({"sub": "u", "tenant": "t"});
        assert!(prefixed.map(&none).unwrap().groups.is_empty());
        let unread = mapping(|claims| claims.groups = String::new());
        assert!(unread.map(&claims).unwrap().groups.is_empty());
    }

    #[test]
    fn a_fixed_tenant_ignores_any_tenant_claim() {
        let single = mapping(|claims| {
            claims.tenant = String::new();
            claims.fixed_tenant = "acme".into();
        });
        assert_eq!(single.map(&json!({"sub": "u", "tenant": "globex"})).unwrap().tenant, "acme");
        assert_eq!(single.map(&json!({"sub": "u"})).unwrap().tenant, "acme");
    }

    #[test]
    fn a_missing_or_blank_user_or_tenant_names_the_key() {
        let org = mapping(|claims| claims.tenant = "org_id".into());
        for (claims, key) in [
            (json!({"sub": "u", "tenant": "acme"}), "auth.claims.tenant"),
            (json!({"sub": "u", "org_id": " "}), "auth.claims.tenant"),
            (json!({"sub": "u", "org_id": ["acme"]}), "auth.claims.tenant"),
            (json!({"org_id": "acme"}), "auth.claims.user"),
            (json!({"sub": 5, "org_id": "acme"}), "auth.claims.user"),
        ] {
            assert_eq!(org.map(&claims).unwrap_err().key, key, "{claims}");
        }
        assert_eq!(org.map(&json!({"sub": "u", "org_id": "acme"})).unwrap().tenant, "acme");
    }

    #[test]
    fn with_a_role_map_only_listed_names_grant_roles() {
        let claims = json!({"sub": "u", "tenant": "t", "roles": ["admin", "warrant-admin", "replica"]});
        let mapped = mapping(|claims| {
            claims.role_map = BTreeMap::from([("admin".into(), vec!["warrant-admin".into(), "superuser".into()])])
        });
        assert_eq!(mapped.map(&claims).unwrap().roles, [Role::Admin].into_iter().collect());
        let only_own_names = json!({"sub": "u", "tenant": "t", "roles": ["admin", "replica"]});
        assert!(mapped.map(&only_own_names).unwrap().roles.is_empty(), "warrant's names grant nothing beside a map");
        assert_eq!(
            mapping(|_| {}).map(&only_own_names).unwrap().roles,
            [Role::Admin, Role::Replica].into_iter().collect(),
            "without a map the names are warrant's own"
        );
    }
}
