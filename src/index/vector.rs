//! TEMP local placeholder (brute force) until the vector branch merges.
#![allow(missing_docs)]
use super::{Hit, IndexResult, Slot};
use crate::domain::DocOrdinal;
use roaring::RoaringBitmap;
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VectorParams {
    pub dimension: usize,
    pub max_connections: usize,
    pub ef_construction: usize,
    pub ef_search: usize,
    pub exact_scan_threshold: usize,
    pub exact_scan_max_fraction: f64,
}
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VectorStrategy {
    Exact,
    Graph,
    Empty,
}
impl VectorStrategy {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Exact => "exact",
            Self::Graph => "graph",
            Self::Empty => "empty",
        }
    }
}
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct VectorReport {
    pub strategy: VectorStrategy,
    pub allowed: usize,
    pub distance_computations: usize,
}
#[derive(Clone, Debug)]
pub struct VectorSearch {
    pub hits: Vec<Hit>,
    pub report: VectorReport,
}
pub struct VectorIndex {
    params: VectorParams,
    data: Vec<f32>,
    ords: Vec<DocOrdinal>,
}
impl VectorIndex {
    pub fn new(params: VectorParams) -> Self {
        Self { params, data: vec![], ords: vec![] }
    }
    pub fn len(&self) -> usize {
        self.ords.len()
    }
    pub fn is_empty(&self) -> bool {
        self.ords.is_empty()
    }
    pub fn dimension(&self) -> usize {
        self.params.dimension
    }
    pub fn insert_batch(&mut self, items: &[(Slot, DocOrdinal, Vec<f32>)]) -> IndexResult<()> {
        for (_, o, v) in items {
            self.data.extend(v);
            self.ords.push(*o);
        }
        Ok(())
    }
    pub fn search(&self, query: &[f32], k: usize, allowed: &RoaringBitmap) -> VectorSearch {
        let d = self.params.dimension;
        let mut hits: Vec<Hit> = (0..self.len())
            .filter(|s| allowed.contains(self.ords[*s]))
            .map(|s| Hit { slot: s as u32, score: crate::embed::dot(query, &self.data[s * d..(s + 1) * d]) })
            .collect();
        let n = hits.len();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.slot.cmp(&b.slot)));
        hits.truncate(k);
        VectorSearch {
            hits,
            report: VectorReport { strategy: VectorStrategy::Exact, allowed: n, distance_computations: n },
        }
    }
    pub fn vector(&self, slot: Slot) -> &[f32] {
        let d = self.params.dimension;
        &self.data[slot as usize * d..(slot as usize + 1) * d]
    }
}
