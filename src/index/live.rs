//! The HNSW graph a shard inserts into (Malkov & Yashunin 2018, algorithms 1, 2 and 4), built
//! here over flat arrays: the bottom layer is one array of `2M` neighbour slots per node plus a
//! length, the few nodes above it (about one in `M`) keep one list per upper layer. Nothing
//! holds a copy of a vector (the index's [`VectorStore`](super::vector) row of a node is read
//! through the accessor every insert is given), nothing is behind a lock or an `Arc`, and the
//! search walk reads the same arrays ([`Adjacency`]) instead of a copy refreshed after each
//! batch.
//!
//! Why not hnsw_rs, which built this graph before: per node it keeps its own copy of the vector
//! (1,536 bytes at dimension 384), an `Arc<RwLock<..>>` of 16 layer lists and one
//! `Arc<PointWithOrder>` per neighbour; a node that had ingested since its start held ~4 KB more
//! per such chunk than one loaded from its index set (BENCHMARKS.md, "Memory per chunk"), and
//! every batch copied the whole adjacency again for the walk. hnsw_rs remains the reference the
//! benchmark builds side by side (`lab`).
//!
//! Construction, per inserted node `q` at level `l` (drawn from `-ln(U) / ln(M)`, `U` a hash of
//! the node's slot, so a graph depends only on its vectors, their order and the batch
//! boundaries, never on the threads):
//! greedy descent (pool of 1) through the layers above `l`, then at each layer from `l` down a
//! best-first search with a pool of `ef_construction` whose results choose up to the layer's
//! capacity (`2M` at layer 0, `M` above) by the paper's heuristic (a candidate is kept unless a
//! neighbour already kept is closer to it than `q` is); each chosen neighbour links back, and a
//! list over its capacity drops its least similar member. Similarity is the dot product of unit
//! vectors (cosine), higher is closer, ties by the lower node id. These are the choices hnsw_rs
//! makes (its graph is what the walk and the planner were tuned on); the paper's variant (`M`
//! links at layer 0, full lists cut by the heuristic) made a filtered walk at 10 % of the
//! vectors score 20 % more nodes at equal recall (BENCHMARKS.md).
//!
//! Large batches insert in parallel ([`LiveGraph::extend`]): groups of nodes search the graph
//! as it stood before the group on rayon's threads, then are linked in order, each choosing among
//! the `ef_construction` most similar of what it found and of the group's earlier nodes (1.4x
//! faster on 2 cores, the same walk work and recall; BENCHMARKS.md).
//!
//! Invariants kept by this module:
//! - node ids are local (`0..nodes`); node `n` is slot `base + n`; every neighbour id is a node
//!   and never the node itself; a list holds no duplicate and at most its layer's capacity;
//! - a node's lists exist for layers `0..=level(n)`; `entry` is a node of the top layer whenever
//!   the graph is not empty.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::distance::{Half, dot_half, dot_halves, from_half, prefetch};
use super::frozen::{Adjacency, FrozenGraph};
use super::{Hit, Slot, WorseFirst};

mod changes;

pub(crate) use changes::GraphChanges;

/// Highest level a node can draw (16 layers, as the image format allows).
pub(crate) const MAX_LEVEL: usize = 15;

/// [`LiveGraph::extend`] searches in parallel once the graph and what is left to insert both
/// hold at least this many nodes.
pub(crate) const PARALLEL_MIN_NODES: usize = 1024;

/// Nodes searched in parallel against the same graph, then linked in order.
const PARALLEL_GROUP: usize = 256;

/// Marks a node without upper layers in [`LiveGraph::upper_start`].
const NO_UPPER: u32 = u32::MAX;

/// A growable HNSW graph over flat arrays (see the module docs).
#[derive(Clone, Debug)]
pub(crate) struct LiveGraph {
    /// Slot of local node 0.
    base: Slot,
    /// M: the capacity of an upper-layer list (layer 0 holds `2M`).
    max_connections: usize,
    /// Pool of the construction search.
    ef_construction: usize,
    /// `1 / ln(M)`: the level distribution's scale.
    level_scale: f64,
    /// Layer 0: node `n`'s neighbours are `bottom[n * 2M..][..bottom_len[n]]`.
    bottom: Vec<Slot>,
    /// Length of each node's layer-0 list.
    bottom_len: Vec<u16>,
    /// Level of each node.
    levels: Vec<u8>,
    /// Index in `upper` of node `n`'s layer-1 list (its layer-`l` list is at `+ l - 1`), or
    /// [`NO_UPPER`].
    upper_start: Vec<u32>,
    /// The upper-layer lists of the nodes above layer 0.
    upper: Vec<Vec<Slot>>,
    /// A node of the top layer: where inserts and walks start.
    entry: Option<Slot>,
    /// The top layer.
    top: usize,
    /// Visit marks of the construction searches made on this thread.
    visits: Visits,
    /// Whether list changes are recorded in `touched` (a journaled shard's graph).
    track: bool,
    /// Nodes whose lists changed since the last [`LiveGraph::take_changes`] (repeats allowed).
    touched: Vec<Slot>,
}

/// Visit marks of construction searches: node `n` was seen by the current search when
/// `marks[n] == epoch` (a scratch reused across searches, so none clears an array).
#[derive(Clone, Debug, Default)]
struct Visits {
    marks: Vec<u32>,
    epoch: u32,
}

impl Visits {
    /// Starts a search over `nodes` nodes: a fresh mark.
    fn start(&mut self, nodes: usize) -> u32 {
        if self.marks.len() < nodes {
            self.marks.resize(nodes, 0);
        }
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.marks.fill(0);
            self.epoch = 1;
        }
        self.epoch
    }
}

thread_local! {
    /// The visit marks of the searches a rayon worker makes for [`LiveGraph::extend`].
    static VISITS: std::cell::RefCell<Visits> = std::cell::RefCell::new(Visits::default());
}

impl LiveGraph {
    /// An empty graph whose first node will be slot `base`, with `M = max_connections` (at
    /// least 2) and a construction pool of `ef_construction` (at least 1).
    pub(crate) fn new(base: Slot, max_connections: usize, ef_construction: usize) -> Self {
        let max_connections = max_connections.clamp(2, usize::from(u16::MAX) / 2);
        Self {
            base,
            max_connections,
            ef_construction: ef_construction.max(1),
            level_scale: 1.0 / (max_connections as f64).ln(),
            bottom: Vec::new(),
            bottom_len: Vec::new(),
            levels: Vec::new(),
            upper_start: Vec::new(),
            upper: Vec::new(),
            entry: None,
            top: 0,
            visits: Visits::default(),
            track: false,
            touched: Vec::new(),
        }
    }

    /// A live graph holding `frozen`'s nodes and lists, so that later inserts extend it; `None`
    /// when a list is longer than this graph's capacity for its layer (a graph built with a
    /// larger M stays sealed) or breaks this module's invariants (names its node or repeats).
    pub(crate) fn from_frozen(frozen: &FrozenGraph, max_connections: usize, ef_construction: usize) -> Option<Self> {
        let mut live = Self::new(frozen.base(), max_connections, ef_construction);
        let nodes = frozen.nodes();
        let top = frozen.top_layer();
        // A node's level: the highest layer where it has a list or is in one (the image does
        // not record levels, and a node alone at its layer has an empty list); the entry
        // reaches the top.
        let mut levels = vec![0usize; nodes];
        for layer in 1..=top {
            for node in 0..nodes as Slot {
                let list = frozen.neighbours(node, layer);
                if !list.is_empty() {
                    levels[node as usize] = layer;
                }
                for &neighbour in list {
                    levels[neighbour as usize] = levels[neighbour as usize].max(layer);
                }
            }
        }
        if let Some(entry) = frozen.entry() {
            levels[entry as usize] = top;
        }
        live.reserve(nodes);
        let mut sorted = Vec::new();
        for (node, &level) in levels.iter().enumerate() {
            let node = node as Slot;
            live.push_node(level);
            for layer in 0..=level {
                let list = frozen.neighbours(node, layer);
                sorted.clear();
                sorted.extend_from_slice(list);
                sorted.sort_unstable();
                sorted.dedup();
                if list.len() > live.capacity(layer) || sorted.len() < list.len() || list.contains(&node) {
                    return None;
                }
                live.set_list(node, layer, list);
            }
        }
        live.entry = frozen.entry();
        live.top = top;
        Some(live)
    }

    /// The adjacency in compressed sparse rows (the image format and sealed graphs).
    pub(crate) fn to_frozen(&self) -> FrozenGraph {
        let nodes = self.levels.len();
        if nodes == 0 {
            return FrozenGraph::from_parts(self.base, 0, None, Vec::new()).expect("an empty graph is well formed");
        }
        let layers = (0..=self.top)
            .map(|layer| {
                let mut offsets = Vec::with_capacity(nodes + 1);
                let mut neighbours = Vec::new();
                offsets.push(0);
                for node in 0..nodes as Slot {
                    neighbours.extend_from_slice(self.neighbours(node, layer));
                    offsets.push(u32::try_from(neighbours.len()).expect("adjacency fits u32 offsets"));
                }
                (offsets, neighbours)
            })
            .collect::<Vec<_>>();
        FrozenGraph::from_parts(self.base, nodes, self.entry, layers).expect("a live graph is well formed")
    }

    /// Bytes held by the arrays (scratch included).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.bottom.capacity() * 4
            + self.bottom_len.capacity() * 2
            + self.levels.capacity()
            + self.upper_start.capacity() * 4
            + self.upper.capacity() * std::mem::size_of::<Vec<Slot>>()
            + self.upper.iter().map(|list| list.capacity() * 4).sum::<usize>()
            + self.visits.marks.capacity() * 4
    }

    /// Reserves room for `additional` more nodes.
    pub(crate) fn reserve(&mut self, additional: usize) {
        self.bottom.reserve(additional * self.bottom_capacity());
        self.bottom_len.reserve(additional);
        self.levels.reserve(additional);
        self.upper_start.reserve(additional);
        self.visits.marks.reserve(additional);
    }

    /// Inserts the next `count` nodes (slots `base + nodes()` on), whose vectors and every
    /// other node's are read through `vector` (by slot; unit vectors of one dimension).
    ///
    /// Up to [`PARALLEL_MIN_NODES`] nodes, and while the graph is smaller than that, one node at a
    /// time. Past that, in groups of [`PARALLEL_GROUP`]: every node of a group searches the graph
    /// as it stood before the group, in parallel (rayon), then the group is linked in order, each
    /// node choosing among what it found and the group's earlier nodes (scored exactly). The
    /// graph depends on the vectors, their order and the batch boundaries, never on the threads.
    pub(crate) fn extend<'v>(&mut self, count: usize, vector: impl Fn(Slot) -> &'v [Half] + Sync) {
        let mut left = count;
        while left > 0 {
            let parallel = self.nodes() >= PARALLEL_MIN_NODES && left >= PARALLEL_MIN_NODES;
            if !parallel {
                self.insert(&vector);
                left -= 1;
                continue;
            }
            let group = left.min(PARALLEL_GROUP);
            self.insert_group(group, &vector);
            left -= group;
        }
    }

    /// Inserts the next node, alone.
    fn insert<'v>(&mut self, vector: &(impl Fn(Slot) -> &'v [Half] + Sync)) {
        let node = Slot::try_from(self.levels.len()).expect("slot space exhausted");
        let level = self.draw_level(self.base + node);
        self.push_node(level);
        let mut visits = std::mem::take(&mut self.visits);
        let found = self.search_phase(node, level, vector, &mut visits);
        self.visits = visits;
        self.link_phase(node, level, found, &[], vector);
    }

    /// Inserts the next `group` nodes: searches in parallel, links in order.
    fn insert_group<'v>(&mut self, group: usize, vector: &(impl Fn(Slot) -> &'v [Half] + Sync)) {
        use rayon::prelude::*;
        let first = Slot::try_from(self.levels.len()).expect("slot space exhausted");
        let members: Vec<(Slot, usize)> = (first..first + group as Slot)
            .map(|node| {
                let level = self.draw_level(self.base + node);
                self.push_node(level);
                (node, level)
            })
            .collect();
        // The group's nodes have no links yet, so no search reaches them.
        let this = &*self;
        let found: Vec<Vec<Vec<Hit>>> = members
            .par_iter()
            .map(|&(node, level)| {
                VISITS.with(|visits| this.search_phase(node, level, vector, &mut visits.borrow_mut()))
            })
            .collect();
        for (position, ((node, level), found)) in members.iter().zip(found).enumerate() {
            self.link_phase(*node, *level, found, &members[..position], vector);
        }
    }

    /// What `node` (of `level`) finds in the graph: per layer from 0 to the lower of its level
    /// and the top, the `ef_construction` most similar nodes, best first (empty when the graph
    /// is).
    fn search_phase<'v>(
        &self,
        node: Slot,
        level: usize,
        vector: &impl Fn(Slot) -> &'v [Half],
        visits: &mut Visits,
    ) -> Vec<Vec<Hit>> {
        let Some(entry) = self.entry else {
            return Vec::new();
        };
        let base = self.base;
        let at = |node: Slot| vector(base + node);
        // Widened once: every score of the search is then `dot_half` (equal to `dot_halves`).
        let query = &from_half(at(node));
        let mut current = Hit { slot: entry, score: dot_half(query, at(entry)) };
        for layer in (level + 1..=self.top).rev() {
            current = self.greedy(query, current, layer, &at);
        }
        let lowest = level.min(self.top);
        let mut found = vec![Vec::new(); lowest + 1];
        let mut entries = vec![current];
        for layer in (0..=lowest).rev() {
            found[layer] = self.search_layer(query, &entries, self.ef_construction, layer, &at, visits);
            entries.clone_from(&found[layer]);
        }
        found
    }

    /// Links `node` (of `level`) at every layer it reaches: its list chosen by the heuristic
    /// from the `ef_construction` most similar of what it `found` and the `earlier` nodes of its
    /// group that reach the layer, and a link back from each chosen neighbour; a level above the
    /// top makes it the entry.
    fn link_phase<'v>(
        &mut self,
        node: Slot,
        level: usize,
        mut found: Vec<Vec<Hit>>,
        earlier: &[(Slot, usize)],
        vector: &impl Fn(Slot) -> &'v [Half],
    ) {
        let base = self.base;
        let at = |node: Slot| vector(base + node);
        let query = at(node);
        // Layers above the graph's top (a new top, or an empty graph): only group mates.
        found.resize(level + 1, Vec::new());
        for (layer, mut candidates) in found.into_iter().enumerate() {
            let mates = earlier.iter().filter(|(_, mate_level)| *mate_level >= layer);
            let before = candidates.len();
            candidates.extend(mates.map(|&(mate, _)| Hit { slot: mate, score: dot_halves(query, at(mate)) }));
            if candidates.len() > before {
                candidates.sort_unstable_by_key(|hit| WorseFirst(*hit));
                // What a search of the graph holding the mates would have returned: the pool's
                // worth of the most similar. Farther mates would pass the heuristic as new
                // directions and fill the list with long links (a filtered walk then scored
                // 70 % more nodes at s = 0.1).
                candidates.truncate(self.ef_construction);
            }
            let chosen = select_neighbours(&candidates, self.capacity(layer), &at);
            let ids: Vec<Slot> = chosen.iter().map(|hit| hit.slot).collect();
            self.set_list(node, layer, &ids);
            for neighbour in chosen {
                self.link(neighbour.slot, Hit { slot: node, score: neighbour.score }, layer, &at);
            }
        }
        if self.entry.is_none() || level > self.top {
            self.entry = Some(node);
            self.top = level;
        }
    }

    fn bottom_capacity(&self) -> usize {
        2 * self.max_connections
    }

    /// The node's level from a hash of its slot: `floor(-ln(U) / ln(M))`, at most [`MAX_LEVEL`].
    fn draw_level(&self, slot: Slot) -> usize {
        let bits = splitmix64(0x5eed_9a4f_0c1d_b7e3 ^ u64::from(slot)) >> 11;
        // U in (0, 1]: the logarithm is finite.
        let uniform = (bits + 1) as f64 / (1u64 << 53) as f64;
        ((-uniform.ln() * self.level_scale).floor() as usize).min(MAX_LEVEL)
    }

    /// Appends a node of `level` with empty lists.
    fn push_node(&mut self, level: usize) {
        let capacity = self.bottom_capacity();
        self.bottom.resize(self.bottom.len() + capacity, 0);
        self.bottom_len.push(0);
        self.levels.push(u8::try_from(level).expect("levels are at most MAX_LEVEL"));
        if level == 0 {
            self.upper_start.push(NO_UPPER);
        } else {
            self.upper_start.push(u32::try_from(self.upper.len()).expect("upper lists fit u32"));
            for _ in 0..level {
                self.upper.push(Vec::with_capacity(self.max_connections));
            }
        }
    }

    /// Replaces `node`'s list at `layer` (a layer it reaches; at most the capacity).
    fn set_list(&mut self, node: Slot, layer: usize, list: &[Slot]) {
        if self.track {
            self.touched.push(node);
        }
        let node = node as usize;
        if layer == 0 {
            let capacity = self.bottom_capacity();
            self.bottom[node * capacity..node * capacity + list.len()].copy_from_slice(list);
            self.bottom_len[node] = u16::try_from(list.len()).expect("lists fit their capacity");
        } else {
            let index = self.upper_start[node] as usize + layer - 1;
            self.upper[index].clear();
            self.upper[index].extend_from_slice(list);
        }
    }

    /// Links at `layer`: `2M` at layer 0, `M` above.
    fn capacity(&self, layer: usize) -> usize {
        if layer == 0 { self.bottom_capacity() } else { self.max_connections }
    }

    /// Adds `new` (scored against `node`) to `node`'s list at `layer`; a full list drops its
    /// least similar member (which may be `new`).
    fn link<'v>(&mut self, node: Slot, new: Hit, layer: usize, at: &impl Fn(Slot) -> &'v [Half]) {
        let capacity = self.capacity(layer);
        let list = self.neighbours(node, layer);
        if list.contains(&new.slot) {
            return;
        }
        if list.len() < capacity {
            let mut grown = list.to_vec();
            grown.push(new.slot);
            self.set_list(node, layer, &grown);
            return;
        }
        let origin = at(node);
        let mut candidates: Vec<Hit> = list
            .iter()
            .map(|&slot| Hit { slot, score: dot_halves(origin, at(slot)) })
            .chain(std::iter::once(new))
            .collect();
        candidates.sort_unstable_by_key(|hit| WorseFirst(*hit));
        let kept: Vec<Slot> = candidates.iter().take(capacity).map(|hit| hit.slot).collect();
        self.set_list(node, layer, &kept);
    }

    /// Greedy search of one layer from `current`: moves to a closer neighbour while one exists.
    fn greedy<'v>(&self, query: &[f32], mut current: Hit, layer: usize, at: &impl Fn(Slot) -> &'v [Half]) -> Hit {
        loop {
            let mut moved = false;
            for &neighbour in self.neighbours(current.slot, layer) {
                let candidate = Hit { slot: neighbour, score: dot_half(query, at(neighbour)) };
                if WorseFirst(candidate) < WorseFirst(current) {
                    current = candidate;
                    moved = true;
                }
            }
            if !moved {
                return current;
            }
        }
    }

    /// Best-first search of `layer` from `entries` with a pool of `ef`: the pool, best first.
    fn search_layer<'v>(
        &self,
        query: &[f32],
        entries: &[Hit],
        ef: usize,
        layer: usize,
        at: &impl Fn(Slot) -> &'v [Half],
        visits: &mut Visits,
    ) -> Vec<Hit> {
        let epoch = visits.start(self.nodes());
        let visited = &mut visits.marks;
        // Best candidate on top.
        let mut candidates: BinaryHeap<Reverse<WorseFirst>> = BinaryHeap::with_capacity(ef * 2);
        // Worst retained result on top.
        let mut results: BinaryHeap<WorseFirst> = BinaryHeap::with_capacity(ef + 1);
        for &entry in entries {
            visited[entry.slot as usize] = epoch;
            candidates.push(Reverse(WorseFirst(entry)));
            results.push(WorseFirst(entry));
            if results.len() > ef {
                results.pop();
            }
        }
        let mut fresh: Vec<Slot> = Vec::with_capacity(self.bottom_capacity());
        while let Some(Reverse(WorseFirst(candidate))) = candidates.pop() {
            if results.len() >= ef && results.peek().is_some_and(|worst| WorseFirst(candidate) > *worst) {
                break;
            }
            fresh.clear();
            for &neighbour in self.neighbours(candidate.slot, layer) {
                if visited[neighbour as usize] != epoch {
                    visited[neighbour as usize] = epoch;
                    fresh.push(neighbour);
                }
            }
            for &neighbour in &fresh {
                prefetch(at(neighbour));
            }
            for &neighbour in &fresh {
                let hit = Hit { slot: neighbour, score: dot_half(query, at(neighbour)) };
                if results.len() < ef || results.peek().is_some_and(|worst| WorseFirst(hit) < *worst) {
                    candidates.push(Reverse(WorseFirst(hit)));
                    results.push(WorseFirst(hit));
                    if results.len() > ef {
                        results.pop();
                    }
                }
            }
        }
        let mut found: Vec<Hit> = results.into_iter().map(|WorseFirst(hit)| hit).collect();
        found.sort_unstable_by_key(|hit| WorseFirst(*hit));
        found
    }
}

impl Adjacency for LiveGraph {
    fn base(&self) -> Slot {
        self.base
    }

    fn nodes(&self) -> usize {
        self.levels.len()
    }

    fn entry(&self) -> Option<Slot> {
        self.entry
    }

    fn top_layer(&self) -> usize {
        self.top
    }

    #[inline]
    fn neighbours(&self, node: Slot, layer: usize) -> &[Slot] {
        let node = node as usize;
        if layer == 0 {
            let Some(&length) = self.bottom_len.get(node) else {
                return &[];
            };
            let start = node * self.bottom_capacity();
            return &self.bottom[start..start + usize::from(length)];
        }
        match (self.levels.get(node), self.upper_start.get(node)) {
            (Some(&level), Some(&start)) if layer <= usize::from(level) => &self.upper[start as usize + layer - 1],
            _ => &[],
        }
    }

    #[inline]
    fn prefetch_offsets(&self, node: Slot, layer: usize) {
        if layer == 0 {
            let node = node as usize;
            if let Some(length) = self.bottom_len.get(node..=node) {
                prefetch(length);
            }
        }
    }

    #[inline]
    fn prefetch_neighbours(&self, node: Slot, layer: usize) {
        prefetch(self.neighbours(node, layer));
    }
}

/// The paper's neighbour heuristic (algorithm 4, without extending or keeping pruned
/// candidates): from `candidates`, best first, keeps at most `limit`, each unless a kept one is
/// more similar to it than the candidate is to the query (`candidate.score`).
fn select_neighbours<'v>(candidates: &[Hit], limit: usize, at: &impl Fn(Slot) -> &'v [Half]) -> Vec<Hit> {
    let mut kept: Vec<Hit> = Vec::with_capacity(limit);
    for &candidate in candidates {
        if kept.len() >= limit {
            break;
        }
        let row = at(candidate.slot);
        if kept.iter().all(|chosen| dot_halves(row, at(chosen.slot)) <= candidate.score) {
            kept.push(candidate);
        }
    }
    kept
}

/// SplitMix64 (Steele, Lea & Flood 2014): a well-mixed 64-bit hash of `value`.
fn splitmix64(value: u64) -> u64 {
    let mut z = value.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
