use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::layout::Layout;

/// Who may read a document inside its tenant.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DocAcl {
    /// Groups whose members may read the document.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Users who may read the document.
    #[serde(default)]
    pub users: Vec<String>,
}

/// One document of one tenant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Document {
    /// Owning tenant.
    pub tenant: String,
    /// Tenant-scoped document id.
    pub doc_id: String,
    /// Version, increasing with every upsert.
    pub version: u64,
    /// Display title (never used as a key).
    pub title: String,
    /// Full text; chunk offsets index into it in characters.
    pub text: String,
    /// Access list.
    pub acl: DocAcl,
    /// Pages and heading paths of the text, when it was extracted from a file (`None` for text
    /// submitted as text). Never encoded with the document: each chunk keeps its part
    /// ([`super::Chunk::layout`]).
    #[serde(skip)]
    pub layout: Option<Arc<Layout>>,
}
