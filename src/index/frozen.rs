//! A read-only copy of the HNSW graph that hnsw_rs builds (Malkov & Yashunin 2018), laid out
//! for the search walk: one compressed-sparse-row adjacency per layer (`offsets` + neighbour
//! slots as `u32`), so reading a neighbour list is two loads and a slice, with no lock, no
//! `Arc` and no allocation (hnsw_rs keeps each node's lists behind an `RwLock` and hands out
//! copies).
//!
//! hnsw_rs still builds the graph (and owns it); [`FrozenGraph::freeze`] copies its adjacency
//! after every insert batch, O(nodes x M) time.
//!
//! Invariants kept by this module:
//! - node ids are slots (`0..len`): layer `l` lists, for every slot, the slots of its
//!   neighbours at layer `l` (empty when the node does not reach that layer);
//! - `entry` is a node of the top layer whenever the graph is not empty.

use std::sync::Arc;

use hnsw_rs::hnsw::Point;

use super::Slot;

/// One layer's adjacency in compressed sparse rows.
#[derive(Clone, Debug, Default)]
struct Layer {
    /// Neighbours of slot `s` are `neighbours[offsets[s]..offsets[s + 1]]`; `len + 1` entries.
    offsets: Vec<u32>,
    /// Neighbour slots of every node, concatenated.
    neighbours: Vec<Slot>,
}

/// The frozen adjacency of every layer plus the entry point.
#[derive(Clone, Debug, Default)]
pub(crate) struct FrozenGraph {
    /// `layers[0]` is the bottom layer (every node).
    layers: Vec<Layer>,
    /// A node of the top layer: where the walk starts its descent.
    entry: Option<Slot>,
}

impl FrozenGraph {
    /// Copies the adjacency of `points` (node of slot `s` at index `s`); `entry` must be a node
    /// of the top layer `top`.
    pub(crate) fn freeze(points: &[Arc<Point<'static, f32>>], entry: Option<Slot>, top: usize) -> Self {
        let mut layers: Vec<Layer> = (0..=top)
            .map(|layer| Layer {
                offsets: Vec::with_capacity(points.len() + 1),
                // Upper layers hold about 1/M of the nodes each.
                neighbours: Vec::with_capacity(if layer == 0 { points.len() * 24 } else { 0 }),
            })
            .collect();
        for layer in &mut layers {
            layer.offsets.push(0);
        }
        for (slot, point) in points.iter().enumerate() {
            debug_assert_eq!(point.get_origin_id(), slot, "graph nodes are in slot order");
            let lists = point.get_neighborhood_id();
            for (number, layer) in layers.iter_mut().enumerate() {
                if let Some(list) = lists.get(number) {
                    layer.neighbours.extend(
                        list.iter().map(|neighbour| Slot::try_from(neighbour.d_id).expect("hnsw data ids are slots")),
                    );
                }
                let end = u32::try_from(layer.neighbours.len()).expect("adjacency fits u32 offsets");
                layer.offsets.push(end);
            }
        }
        for layer in &mut layers {
            layer.neighbours.shrink_to_fit();
        }
        Self { layers, entry }
    }

    /// Where the descent starts (`None` when the graph is empty).
    pub(crate) fn entry(&self) -> Option<Slot> {
        self.entry
    }

    /// Index of the top layer (0 when empty).
    pub(crate) fn top_layer(&self) -> usize {
        self.layers.len().saturating_sub(1)
    }

    /// Neighbour slots of `slot` at `layer` (empty above the top layer or the node's level).
    #[inline]
    pub(crate) fn neighbours(&self, slot: Slot, layer: usize) -> &[Slot] {
        let Some(layer) = self.layers.get(layer) else {
            return &[];
        };
        let slot = slot as usize;
        match (layer.offsets.get(slot), layer.offsets.get(slot + 1)) {
            (Some(&start), Some(&end)) => &layer.neighbours[start as usize..end as usize],
            _ => &[],
        }
    }

    /// Bytes held by the adjacency arrays.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.layers
            .iter()
            .map(|layer| (layer.offsets.capacity() + layer.neighbours.capacity()) * std::mem::size_of::<u32>())
            .sum()
    }
}
