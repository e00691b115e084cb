use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

/// Dense internal ordinal of one document *version*. ACL bitmaps are over these ordinals; a new
/// version of a document always gets a fresh ordinal so the old one can be tombstoned atomically.
pub type DocOrdinal = u32;

/// Stable, content-derived identity of a chunk: the first 16 bytes of
/// `sha256(tenant \0 doc_id \0 version \0 start \0 end \0 normalized_text)`.
///
/// Both indexes key on it, so one chunk found by both retrievers fuses into one candidate.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChunkId([u8; 16]);

impl ChunkId {
    /// Derives the identity of a chunk from its provenance and text.
    pub fn derive(tenant: &str, doc_id: &str, version: u64, start: usize, end: usize, text: &str) -> Self {
        let mut hasher = Sha256::new();
        for part in [tenant.as_bytes(), doc_id.as_bytes()] {
            hasher.update(part);
            hasher.update([0u8]);
        }
        hasher.update(version.to_le_bytes());
        hasher.update((start as u64).to_le_bytes());
        hasher.update((end as u64).to_le_bytes());
        let normalized: String = text.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase();
        hasher.update(normalized.as_bytes());
        let digest = hasher.finalize();
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(&digest[..16]);
        Self(bytes)
    }

    /// Builds an id from its raw bytes (snapshots, tests).
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// Parses the 32-character lowercase hex form.
    pub fn parse(text: &str) -> Option<Self> {
        if text.len() != 32 {
            return None;
        }
        let mut bytes = [0u8; 16];
        hex::decode_to_slice(text, &mut bytes).ok()?;
        Some(Self(bytes))
    }
}

impl fmt::Display for ChunkId {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for ChunkId {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "ChunkId({self})")
    }
}

impl Serialize for ChunkId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            serializer.serialize_str(&self.to_string())
        } else {
            self.0.serialize(serializer)
        }
    }
}

impl<'de> Deserialize<'de> for ChunkId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            let text = String::deserialize(deserializer)?;
            Self::parse(&text).ok_or_else(|| serde::de::Error::custom("invalid chunk id"))
        } else {
            Ok(Self(<[u8; 16]>::deserialize(deserializer)?))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_id_is_stable_and_whitespace_insensitive() {
        let first = ChunkId::derive("t", "d", 1, 0, 10, "Hello   world");
        let second = ChunkId::derive("t", "d", 1, 0, 10, "hello world");
        assert_eq!(first, second);
        assert_ne!(first, ChunkId::derive("u", "d", 1, 0, 10, "hello world"));
        assert_ne!(first, ChunkId::derive("t", "d", 2, 0, 10, "hello world"));
        assert_eq!(ChunkId::parse(&first.to_string()), Some(first));
    }

    #[test]
    fn tenant_and_doc_boundaries_cannot_collide() {
        assert_ne!(ChunkId::derive("ab", "c", 1, 0, 1, "x"), ChunkId::derive("a", "bc", 1, 0, 1, "x"));
    }
}
