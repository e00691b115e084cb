//! What inserts change in a [`LiveGraph`], recorded while tracking is on
//! ([`LiveGraph::track_changes`], [`LiveGraph::take_changes`]) and applied to a graph in the
//! same state ([`LiveGraph::apply_changes`]): the graph part of a shard's index journal record.
//!
//! Invariants kept by this module: a change set is checked whole against the graph (its base and
//! size, every node's level, every list's capacity, ids, self-links and repeats, the entry point)
//! before anything is applied, so one that does not fit changes nothing; applying the changes
//! taken from a graph to a graph in that graph's earlier state gives the same lists, entry point
//! and top.

use super::{LiveGraph, MAX_LEVEL};
use crate::index::Slot;
use crate::index::frozen::Adjacency as _;

/// What inserts changed in a live graph since the last [`LiveGraph::take_changes`]: the graph
/// part of an index journal record, applied to the same graph by [`LiveGraph::apply_changes`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct GraphChanges {
    /// Slot of the graph's node 0.
    pub base: Slot,
    /// Nodes before the changes.
    pub nodes_before: u32,
    /// Nodes after them (the new nodes are `nodes_before..nodes_after`).
    pub nodes_after: u32,
    /// The entry point after them.
    pub entry: Option<Slot>,
    /// The top layer after them.
    pub top: u8,
    /// Every node whose lists changed (every new node among them), ascending: its level and its
    /// lists of layers `0..=level`.
    pub nodes: Vec<(Slot, u8, Vec<Vec<Slot>>)>,
}

impl LiveGraph {
    /// Starts (or stops) recording which lists inserts change, for [`LiveGraph::take_changes`].
    pub(crate) fn track_changes(&mut self, on: bool) {
        self.track = on;
        self.touched.clear();
    }

    /// The changes since the last call (or since tracking started), `nodes_before` being the
    /// node count then; forgets them.
    pub(crate) fn take_changes(&mut self, nodes_before: usize) -> GraphChanges {
        let mut touched = std::mem::take(&mut self.touched);
        touched.sort_unstable();
        touched.dedup();
        let nodes = touched
            .into_iter()
            .map(|node| {
                let level = self.levels[node as usize];
                let lists = (0..=usize::from(level)).map(|layer| self.neighbours(node, layer).to_vec()).collect();
                (node, level, lists)
            })
            .collect();
        GraphChanges {
            base: self.base,
            nodes_before: u32::try_from(nodes_before).expect("nodes fit u32"),
            nodes_after: u32::try_from(self.nodes()).expect("nodes fit u32"),
            entry: self.entry,
            top: u8::try_from(self.top).expect("levels are at most MAX_LEVEL"),
            nodes,
        }
    }

    /// Applies `changes` recorded on a graph in this graph's state (same base, same node count):
    /// checks everything first (the reason names what does not fit), then applies all of it.
    pub(crate) fn apply_changes(&mut self, changes: &GraphChanges) -> Result<(), String> {
        self.check_changes(changes)?;
        self.reserve((changes.nodes_after - changes.nodes_before) as usize);
        for (_, level, _) in changes.nodes.iter().filter(|(node, ..)| *node >= changes.nodes_before) {
            self.push_node(usize::from(*level));
        }
        for (node, _, lists) in &changes.nodes {
            for (layer, list) in lists.iter().enumerate() {
                self.set_list(*node, layer, list);
            }
        }
        self.entry = changes.entry;
        self.top = usize::from(changes.top);
        if self.track {
            self.touched.extend(changes.nodes.iter().map(|(node, ..)| *node));
        }
        Ok(())
    }

    /// Whether `changes` fit this graph (see [`LiveGraph::apply_changes`]) and keep the
    /// module's invariants.
    fn check_changes(&self, changes: &GraphChanges) -> Result<(), String> {
        if changes.base != self.base || changes.nodes_before as usize != self.nodes() {
            return Err(format!(
                "recorded on a graph at slot {} with {} nodes, this one is at slot {} with {}",
                changes.base,
                changes.nodes_before,
                self.base,
                self.nodes()
            ));
        }
        let (before, after) = (changes.nodes_before, changes.nodes_after);
        if after < before || u64::from(changes.base) + u64::from(after) > u64::from(Slot::MAX) {
            return Err(format!("node counts {before} -> {after} do not fit"));
        }
        let mut expected_new = before;
        let mut previous: Option<Slot> = None;
        let mut sorted = Vec::new();
        for (node, level, lists) in &changes.nodes {
            if previous.is_some_and(|previous| previous >= *node) || *node >= after {
                return Err(format!("node {node} is out of order or beyond {after} nodes"));
            }
            previous = Some(*node);
            let level = usize::from(*level);
            if *node >= before {
                if *node != expected_new || level > MAX_LEVEL {
                    return Err(format!("new node {node} is missing an earlier one or has level {level}"));
                }
                expected_new += 1;
            } else if usize::from(self.levels[*node as usize]) != level {
                return Err(format!("node {node} has level {}, the record {level}", self.levels[*node as usize]));
            }
            if lists.len() != level + 1 {
                return Err(format!("node {node} of level {level} has {} lists", lists.len()));
            }
            for (layer, list) in lists.iter().enumerate() {
                sorted.clear();
                sorted.extend_from_slice(list);
                sorted.sort_unstable();
                sorted.dedup();
                if list.len() > self.capacity(layer)
                    || sorted.len() < list.len()
                    || list.iter().any(|neighbour| *neighbour >= after || neighbour == node)
                {
                    return Err(format!("node {node}'s list at layer {layer} breaks the graph's rules"));
                }
            }
        }
        if expected_new != after {
            return Err(format!("new nodes {expected_new}..{after} have no lists"));
        }
        let top = usize::from(changes.top);
        match changes.entry {
            None if after == 0 => Ok(()),
            Some(entry) if entry < after && top <= MAX_LEVEL => {
                let level = changes.nodes.iter().find(|(node, ..)| *node == entry).map_or_else(
                    || self.levels.get(entry as usize).map_or(0, |level| usize::from(*level)),
                    |(_, level, _)| usize::from(*level),
                );
                if level == top { Ok(()) } else { Err(format!("entry {entry} has level {level}, the top is {top}")) }
            }
            _ => Err("the entry point does not fit the graph".into()),
        }
    }
}
