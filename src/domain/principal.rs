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
    /// Roles (`admin` unlocks the admin API).
    pub roles: BTreeSet<String>,
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
    pub fn has_role(&self, role: &str) -> bool {
        self.roles.contains(role)
    }
}
