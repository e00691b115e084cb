//! A sealed HNSW graph (Malkov & Yashunin 2018) laid out for the search walk: one
//! compressed-sparse-row adjacency per layer (`offsets` + neighbour slots as `u32`), so reading a
//! neighbour list is two loads and a slice, with no lock and no allocation. Graphs decoded from an
//! index image are sealed this way ([`FrozenGraph::from_parts`]), and the image encodes a live
//! graph through it ([`LiveGraph::to_frozen`](super::live::LiveGraph::to_frozen)). [`Adjacency`] is
//! what the walk reads of either kind.
//!
//! A shard may hold several graphs over consecutive slot ranges (graphs loaded from an index
//! image stay sealed, a fresh one takes later inserts): a graph's nodes are numbered locally,
//! node `n` is slot `base + n`.
//!
//! Invariants kept by this module:
//! - node ids are local (`0..nodes`): layer `l` lists, for every node, the local ids of its
//!   neighbours at layer `l` (empty when the node does not reach that layer); every layer has
//!   `nodes + 1` non-decreasing offsets starting at 0 and every neighbour id is below `nodes`
//!   ([`FrozenGraph::from_parts`] checks this for decoded graphs);
//! - `entry` is a node of the top layer whenever the graph is not empty.

use super::Slot;
use super::distance::prefetch;

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
    /// A node of the top layer: where the walk starts its descent (local id).
    entry: Option<Slot>,
    /// Slot of local node 0.
    base: Slot,
    /// Number of nodes.
    nodes: usize,
}

impl FrozenGraph {
    /// A graph from decoded parts: per layer (bottom first) `nodes + 1` offsets and the
    /// concatenated neighbour lists. Checks every offset and neighbour id and the entry point,
    /// so that the walk can index without bounds surprises; the reason names what is wrong.
    pub(crate) fn from_parts(
        base: Slot,
        nodes: usize,
        entry: Option<Slot>,
        layers: Vec<(Vec<u32>, Vec<Slot>)>,
    ) -> Result<Self, String> {
        if nodes == 0 && (entry.is_some() || !layers.is_empty()) {
            return Err("an empty graph has an entry point or layers".into());
        }
        if nodes > 0 && (entry.is_none() || layers.is_empty()) {
            return Err("a graph with nodes lacks an entry point or layers".into());
        }
        if entry.is_some_and(|entry| entry as usize >= nodes) {
            return Err(format!("entry point {entry:?} beyond the graph's {nodes} nodes"));
        }
        let mut frozen = Vec::with_capacity(layers.len());
        for (number, (offsets, neighbours)) in layers.into_iter().enumerate() {
            if offsets.len() != nodes + 1 || offsets.first() != Some(&0) {
                return Err(format!("layer {number} has {} offsets for {nodes} nodes", offsets.len()));
            }
            if offsets.windows(2).any(|pair| pair[0] > pair[1]) {
                return Err(format!("layer {number} has decreasing offsets"));
            }
            if offsets.last().map(|&end| end as usize) != Some(neighbours.len()) {
                return Err(format!("layer {number}'s offsets do not end at its {} neighbours", neighbours.len()));
            }
            if let Some(bad) = neighbours.iter().find(|&&neighbour| neighbour as usize >= nodes) {
                return Err(format!("layer {number} names neighbour {bad} beyond the graph's {nodes} nodes"));
            }
            frozen.push(Layer { offsets, neighbours });
        }
        Ok(Self { layers: frozen, entry, base, nodes })
    }

    /// Per layer, bottom first: the offsets and the concatenated neighbour lists (encoding).
    pub(crate) fn layer_parts(&self) -> impl Iterator<Item = (&[u32], &[Slot])> {
        self.layers.iter().map(|layer| (layer.offsets.as_slice(), layer.neighbours.as_slice()))
    }

    /// Bytes held by the adjacency arrays.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.layers
            .iter()
            .map(|layer| (layer.offsets.capacity() + layer.neighbours.capacity()) * std::mem::size_of::<u32>())
            .sum()
    }
}

/// What a graph walk reads: a graph over local node ids `0..nodes()` (node `n` is slot
/// `base() + n`) with per-layer neighbour lists. [`FrozenGraph`] (sealed, compressed rows) and
/// [`LiveGraph`](super::live::LiveGraph) (growable, fixed-capacity rows) both serve it.
pub(crate) trait Adjacency {
    /// Slot of local node 0.
    fn base(&self) -> Slot;
    /// Number of nodes (the graph covers slots `base..base + nodes`).
    fn nodes(&self) -> usize;
    /// Where the descent starts (`None` when the graph is empty).
    fn entry(&self) -> Option<Slot>;
    /// Index of the top layer (0 when empty).
    fn top_layer(&self) -> usize;
    /// Local ids of the neighbours of local node `node` at `layer` (empty above the top layer or
    /// the node's level).
    fn neighbours(&self, node: Slot, layer: usize) -> &[Slot];
    /// Hints the cache with what locates `node`'s list at `layer` (nothing is read).
    fn prefetch_offsets(&self, node: Slot, layer: usize);
    /// Hints the cache with `node`'s list at `layer`.
    fn prefetch_neighbours(&self, node: Slot, layer: usize);
}

impl Adjacency for FrozenGraph {
    /// Slot of local node 0.
    fn base(&self) -> Slot {
        self.base
    }

    /// Number of nodes (the graph covers slots `base..base + nodes`).
    fn nodes(&self) -> usize {
        self.nodes
    }

    /// Where the descent starts (`None` when the graph is empty).
    fn entry(&self) -> Option<Slot> {
        self.entry
    }

    /// Index of the top layer (0 when empty).
    fn top_layer(&self) -> usize {
        self.layers.len().saturating_sub(1)
    }

    /// Local ids of the neighbours of local node `slot` at `layer` (empty above the top layer or
    /// the node's level).
    #[inline]
    fn neighbours(&self, slot: Slot, layer: usize) -> &[Slot] {
        let Some(layer) = self.layers.get(layer) else {
            return &[];
        };
        let slot = slot as usize;
        match (layer.offsets.get(slot), layer.offsets.get(slot + 1)) {
            (Some(&start), Some(&end)) => &layer.neighbours[start as usize..end as usize],
            _ => &[],
        }
    }

    /// Prefetches the two offsets that locate the neighbour list of local node `slot` at
    /// `layer` (a cache hint; nothing is read).
    #[inline]
    fn prefetch_offsets(&self, slot: Slot, layer: usize) {
        let slot = slot as usize;
        if let Some(pair) = self.layers.get(layer).and_then(|layer| layer.offsets.get(slot..slot + 2)) {
            prefetch(pair);
        }
    }

    /// Prefetches the neighbour list of local node `slot` at `layer` (reads its offsets, which
    /// [`FrozenGraph::prefetch_offsets`] may have brought in, and hints the list's lines).
    #[inline]
    fn prefetch_neighbours(&self, slot: Slot, layer: usize) {
        prefetch(self.neighbours(slot, layer));
    }
}
