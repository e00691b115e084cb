//! What one insert batch changed in a [`VectorIndex`]: the new slots (ordinal and binary16 row),
//! the live graph's changed lists ([`GraphChanges`]) and the planner's costs after the batch.
//! A journaled shard records one per batch ([`crate::index::shard`]'s journal) so that a restart
//! applies it to the index loaded from the base image instead of inserting the chunks again.
//!
//! Invariants kept by this module: [`VectorIndex::apply_delta`] checks the whole delta against
//! the index (first slot, live graph base and size, row length and finiteness, every list)
//! before it changes anything, so a delta that does not fit leaves the index as it was; an
//! applied delta leaves the index exactly as the one it was taken from (same rows, lists,
//! entry point and costs).

use super::{PlannerCosts, VectorIndex};
use crate::domain::DocOrdinal;
use crate::index::Slot;
use crate::index::distance::{Half, half_is_finite};
use crate::index::frozen::Adjacency as _;
use crate::index::live::GraphChanges;

/// One batch's changes to a vector index (see the module docs).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VectorDelta {
    /// Slot of the first new row.
    pub(crate) first_slot: Slot,
    /// Document ordinal of every new slot.
    pub(crate) ordinals: Vec<DocOrdinal>,
    /// The new rows, `dimension` binary16 components each, concatenated.
    pub(crate) rows: Vec<Half>,
    /// The live graph's changes.
    pub(crate) graph: GraphChanges,
    /// The planner's costs after the batch.
    pub(crate) costs: Option<PlannerCosts>,
    /// The index size at the last calibration, after the batch.
    pub(crate) calibrated_len: u64,
}

impl VectorDelta {
    /// The ordinals of the new slots.
    pub fn ordinals(&self) -> &[DocOrdinal] {
        &self.ordinals
    }
}

impl VectorIndex {
    /// Starts (or stops) recording what inserts change, for [`VectorIndex::take_delta`].
    pub fn track_changes(&mut self, on: bool) {
        self.live.track_changes(on);
    }

    /// Slots and live-graph nodes now: what [`VectorIndex::take_delta`] takes after a batch.
    pub fn mark(&self) -> (Slot, usize) {
        (Slot::try_from(self.len()).expect("slots fit u32"), self.live.nodes())
    }

    /// The changes since `mark` (taken before the batch; tracking must be on).
    pub fn take_delta(&mut self, (first_slot, nodes_before): (Slot, usize)) -> VectorDelta {
        let graph = self.live.take_changes(nodes_before);
        let mut rows = Vec::with_capacity((self.len() - first_slot as usize) * self.dimension());
        for slot in first_slot..self.len() as Slot {
            rows.extend_from_slice(self.store.row(slot));
        }
        VectorDelta {
            first_slot,
            ordinals: self.store.ordinals()[first_slot as usize..].to_vec(),
            rows,
            graph,
            costs: self.costs,
            calibrated_len: self.calibrated_len as u64,
        }
    }

    /// Applies a delta taken from an index in this index's state; the error says why it does not
    /// fit, and then nothing changed.
    pub fn apply_delta(&mut self, delta: &VectorDelta) -> Result<(), String> {
        let dimension = self.dimension();
        if delta.first_slot as usize != self.len() {
            return Err(format!("its first slot is {}, the index holds {} slots", delta.first_slot, self.len()));
        }
        if delta.rows.len() != delta.ordinals.len() * dimension {
            return Err(format!(
                "{} components for {} rows of dimension {dimension}",
                delta.rows.len(),
                delta.ordinals.len()
            ));
        }
        if !delta.rows.iter().all(|bits| half_is_finite(*bits)) {
            return Err("a row component is not finite".into());
        }
        let new_nodes = (delta.graph.nodes_after - delta.graph.nodes_before) as usize;
        if new_nodes != delta.ordinals.len()
            || delta.graph.base as usize + delta.graph.nodes_before as usize != self.len()
        {
            return Err(format!("{new_nodes} new graph nodes for {} new rows", delta.ordinals.len()));
        }
        if let Some(costs) = &delta.costs
            && ![
                costs.scan_ns_per_vector,
                costs.walk_ns_per_evaluation,
                costs.walk_evaluations_unfiltered,
                costs.walk_growth,
            ]
            .iter()
            .all(|value| value.is_finite() && *value >= 0.0)
        {
            return Err("planner costs are negative or not finite".into());
        }
        if delta.calibrated_len > (self.len() + delta.ordinals.len()) as u64 {
            return Err(format!("calibrated at {} vectors", delta.calibrated_len));
        }
        // Checked by the graph before anything changes; the rows cannot fail after this.
        self.live.apply_changes(&delta.graph)?;
        self.store.reserve(delta.ordinals.len());
        for (ordinal, row) in delta.ordinals.iter().zip(delta.rows.chunks_exact(dimension.max(1))) {
            self.store.push_row(*ordinal, row);
        }
        self.costs = delta.costs;
        self.calibrated_len = delta.calibrated_len as usize;
        Ok(())
    }
}
