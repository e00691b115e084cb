use std::collections::BTreeSet;

/// The authenticated caller. Built only from a verified token (or a trusted CLI/test context),
/// never from a request body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// Tenant the caller belongs to; the caller sees nothing outside it.
    pub tenant: String,
    /// The caller's user id (`sub`).
    pub user: String,
    /// Groups the caller is a member of.
    pub groups: BTreeSet<String>,
    /// Roles this server knows (a token's other role names grant nothing and are dropped).
    pub roles: BTreeSet<Role>,
}

/// A role a token may grant. Only an operator (holding the server key) mints `operator` and
/// `replica`; `admin` is a tenant admin of its own tenant; `reviewer` reads and judges the review
/// items of its own tenant (under its own access to documents).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Tenant admin: the admin API for the token's own tenant.
    Admin,
    /// Operator: snapshots of the whole server.
    Operator,
    /// Replica: the change feed of every tenant and the replica snapshot endpoints.
    Replica,
    /// Reviewer: the review queue of the token's own tenant (`/v1/reviews`).
    Reviewer,
}

impl Role {
    /// The role's name in tokens.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Admin => "admin",
            Self::Operator => "operator",
            Self::Replica => "replica",
            Self::Reviewer => "reviewer",
        }
    }

    /// The role named `name` in a token, if this server knows it (exact, case-sensitive).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "admin" => Some(Self::Admin),
            "operator" => Some(Self::Operator),
            "replica" => Some(Self::Replica),
            "reviewer" => Some(Self::Reviewer),
            _ => None,
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

impl Principal {
    /// A principal without roles.
    pub fn new<I, S>(tenant: impl Into<String>, user: impl Into<String>, groups: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            tenant: tenant.into(),
            user: user.into(),
            groups: groups.into_iter().map(Into::into).collect(),
            roles: BTreeSet::new(),
        }
    }

    /// Whether the principal holds the given role.
    pub fn has_role(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Role names are exact: a look-alike or differently cased name grants nothing.
    #[test]
    fn only_known_role_names_parse() {
        for role in [Role::Admin, Role::Operator, Role::Replica, Role::Reviewer] {
            assert_eq!(Role::parse(role.as_str()), Some(role));
        }
        for name in ["Admin", "ADMIN", "admin ", "superuser", "", "opera\u{0442}or", "Reviewer", "reviewers"] {
            assert_eq!(Role::parse(name), None, "{name:?}");
        }
    }
}
