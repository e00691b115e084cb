//! TEMP local placeholder until the lexical branch merges.
#![allow(missing_docs)]
use super::{Hit, IndexResult, Slot};
use crate::domain::DocOrdinal;
use roaring::RoaringBitmap;
#[derive(Clone, Debug)]
pub struct LexicalSearch {
    pub hits: Vec<Hit>,
    pub allowed_docs: usize,
}
pub struct LexicalIndex {
    docs: Vec<(Slot, DocOrdinal, String)>,
}
impl LexicalIndex {
    pub fn new() -> IndexResult<Self> {
        Ok(Self { docs: vec![] })
    }
    pub fn add_batch(&mut self, items: &[(Slot, DocOrdinal, &str, &str)]) -> IndexResult<()> {
        for (s, o, t, x) in items {
            self.docs.push((*s, *o, format!("{t} {x}").to_lowercase()));
        }
        Ok(())
    }
    pub fn delete_ordinals(&mut self, ordinals: &RoaringBitmap) -> IndexResult<()> {
        self.docs.retain(|d| !ordinals.contains(d.1));
        Ok(())
    }
    pub fn search(&self, query: &str, k: usize, allowed: &RoaringBitmap) -> IndexResult<LexicalSearch> {
        let terms: Vec<String> = crate::domain::tokens::words(query).filter(|w| w.len() > 3).collect();
        let mut hits: Vec<Hit> = self
            .docs
            .iter()
            .filter(|d| allowed.contains(d.1))
            .filter_map(|d| {
                let words: Vec<String> = crate::domain::tokens::words(&d.2).collect();
                let s = terms.iter().filter(|t| words.contains(t)).count();
                (s > 0).then_some(Hit { slot: d.0, score: s as f32 })
            })
            .collect();
        let n = self.docs.iter().filter(|d| allowed.contains(d.1)).count();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.slot.cmp(&b.slot)));
        hits.truncate(k);
        Ok(LexicalSearch { hits, allowed_docs: n })
    }
    pub fn len(&self) -> u64 {
        self.docs.len() as u64
    }
}
