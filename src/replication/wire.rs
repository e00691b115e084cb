//! The replication stream's wire: each frame is a little-endian `u32` length, then that many
//! bytes of bincode of a [`Frame`]; a frame is at most [`MAX_FRAME_BYTES`]. The change entries
//! travel as JSON (the feed's and the store's format of a mutation, which bincode cannot decode:
//! it is tagged by `kind`).
//!
//! Why a chunked HTTP response and a separate POST: a stream of length-prefixed frames needs no
//! new dependency or protocol (no WebSocket, no HTTP/2 server push), passes any HTTP proxy, and
//! back-pressure comes for free (actix pulls the next frame only when the socket takes it); the
//! acknowledgement and the lease need a reply, which a one-way HTTP/1.1 body cannot carry.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::acl::{AclChange, AclMutation};
use crate::storage::EncodedDocument;

/// Largest frame a replica accepts (a 500-document batch of long documents is far below).
pub const MAX_FRAME_BYTES: usize = 256 << 20;

/// One frame of the replication stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Frame {
    /// First frame of a stream.
    Hello(Hello),
    /// One committed change.
    Change(ChangeFrame),
    /// Nothing new: the primary is at `epoch` (every change up to it was sent on this stream).
    Heartbeat {
        /// The last epoch sent.
        epoch: u64,
    },
    /// A hint: the content of a document batch the primary is indexing now, not yet committed
    /// (it may never be). A replica may index it ahead, outside every scope; the change that
    /// publishes it carries the same content again, so nothing depends on the hint.
    Content {
        /// The batch's document versions.
        documents: Vec<WireDocument>,
    },
}

/// What a replica learns when its stream opens.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// This stream's session: leases are renewed and changes acknowledged under it.
    pub session: String,
    /// The primary's lineage.
    pub lineage: String,
    /// The epoch the stream starts after.
    pub since: u64,
    /// The lease each renewal grants, in milliseconds.
    pub lease_ms: u64,
    /// `replica.sync` of the primary: `none` means the replica serves without a lease.
    pub sync: String,
}

/// One committed change with the content it adds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChangeFrame {
    /// Its epoch.
    pub epoch: u64,
    /// JSON array of its mutations.
    pub mutations: Vec<u8>,
    /// The document versions it publishes, as the store's rows.
    pub documents: Vec<WireDocument>,
    /// The primary's ordinal counter after it.
    pub next_ordinal: u32,
    /// Whether its writer waits for the replicas' acknowledgements (`replica.sync`).
    pub tracked: bool,
    /// Whether it can remove access (delete, revoke, a retired version).
    pub removes_access: bool,
}

/// One document version's rows ([`EncodedDocument`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireDocument {
    /// Ordinal.
    pub ordinal: u32,
    /// bincode of its chunks.
    pub chunks: Vec<u8>,
    /// Its vectors, little-endian f32.
    pub vectors: Vec<u8>,
    /// bincode of its chunks' sentence vectors, or empty.
    pub sentences: Vec<u8>,
    /// bincode of its chunks' layout maps, or empty (added with issue 49: a primary and its
    /// replicas run the same build).
    pub layouts: Vec<u8>,
}

impl WireDocument {
    pub(super) fn of(document: &EncodedDocument) -> Self {
        Self {
            ordinal: document.ordinal,
            chunks: document.chunks.clone(),
            vectors: document.vectors.clone(),
            sentences: document.sentences.clone(),
            layouts: document.layouts.clone(),
        }
    }

    /// The store's rows again.
    pub fn into_encoded(self) -> EncodedDocument {
        let Self { ordinal, chunks, vectors, sentences, layouts } = self;
        EncodedDocument { ordinal, chunks, vectors, sentences, layouts }
    }
}

impl ChangeFrame {
    /// The change entries and documents, decoded; an error names what is malformed.
    pub fn decode(self) -> Result<(Vec<AclChange>, Vec<EncodedDocument>), String> {
        let mutations: Vec<AclMutation> = serde_json::from_slice(&self.mutations)
            .map_err(|error| format!("change of epoch {}: {error}", self.epoch))?;
        let changes = mutations.into_iter().map(|mutation| AclChange { epoch: self.epoch, mutation }).collect();
        let documents = self.documents.into_iter().map(WireDocument::into_encoded).collect();
        Ok((changes, documents))
    }
}

/// A frame as sent: its length, then its bincode.
pub fn encode_frame(frame: &Frame) -> Bytes {
    let body = bincode::serde::encode_to_vec(frame, bincode::config::standard()).expect("frames are plain data");
    let mut bytes = Vec::with_capacity(4 + body.len());
    bytes.extend_from_slice(&(body.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&body);
    Bytes::from(bytes)
}

/// Cuts frames out of the bytes of a stream as they arrive.
#[derive(Default)]
pub struct FrameReader {
    buffer: Vec<u8>,
}

impl FrameReader {
    /// Appends received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// The next whole frame, if one has arrived; an error for a frame that is too long or does
    /// not decode (the stream cannot be trusted past it).
    pub fn next_frame(&mut self) -> Result<Option<Frame>, String> {
        let Some(header) = self.buffer.get(..4) else { return Ok(None) };
        let length = u32::from_le_bytes(header.try_into().expect("4 bytes")) as usize;
        if length > MAX_FRAME_BYTES {
            return Err(format!("a frame of {length} bytes is longer than {MAX_FRAME_BYTES}"));
        }
        if self.buffer.len() < 4 + length {
            return Ok(None);
        }
        let (frame, read) =
            bincode::serde::decode_from_slice::<Frame, _>(&self.buffer[4..4 + length], bincode::config::standard())
                .map_err(|error| format!("a frame does not decode: {error}"))?;
        if read != length {
            return Err("a frame has trailing bytes".into());
        }
        self.buffer.drain(..4 + length);
        Ok(Some(frame))
    }
}
