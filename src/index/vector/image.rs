//! The vector index image (`graph.bin`): an explicit little-endian, versioned encoding of a
//! [`VectorIndex`], so that a snapshot restore or a durable restart reads the graph instead of
//! rebuilding it (hnsw_rs' own `file_dump` is native-endian and unversioned, and a loaded index
//! borrows its loader).
//!
//! Layout (version 2), every integer little-endian:
//! ```text
//! magic "WRNTHNSW" | version u32 | dimension u32 | max_connections u32 | ef_construction u32
//! | has_costs u8 | scan_ns f64 | walk_ns f64 | walk_evaluations f64 | walk_growth f64
//! | calibrated_len u64 | slots u32 | slots x (ordinal u32, chunk position u32)
//! | slots x dimension binary16 (u16 bits) | graphs u32
//! | graphs x (nodes u32 | entry u32 | layers u32 | layers x (neighbours u32
//!             | (nodes + 1) offsets u32 | neighbours u32))
//! ```
//! Version 1 (written before the rows were binary16) is the same with `slots x dimension f32`;
//! it is still read, each component rounded to binary16 as an insert would round it.
//! Graphs cover consecutive slot ranges from slot 0 (their node counts sum to `slots`). A chunk
//! position of [`NO_CHUNK`] marks a dead slot (its chunk was not written: superseded or deleted).
//!
//! Invariants kept by this module: the decoder checks every length against the bytes left
//! before allocating, every offset and neighbour id, the entry points, the dimension and the
//! finiteness of every float, and refuses trailing bytes; it returns an error, never panics.
//! Whatever it accepts searches like any index: a search still only returns slots whose
//! ordinal is in the scope it is given.

use super::store::{VectorStore, advised_rows};
use super::{FrozenGraph, MAX_LAYER, PlannerCosts, VectorIndex, VectorParams};
use crate::index::Slot;
use crate::index::bytes::Reader;
use crate::index::distance::{Half, fits_half, half_is_finite, to_half, widen};
use crate::index::frozen::Adjacency;
use crate::index::live::LiveGraph;

/// First bytes of a graph image.
pub const GRAPH_MAGIC: &[u8; 8] = b"WRNTHNSW";
/// The version this build writes (it also reads version 1, whose rows are f32).
pub const GRAPH_VERSION: u32 = 2;
/// Chunk position of a slot whose chunk is not stored.
pub const NO_CHUNK: u32 = u32::MAX;
/// Entry value of a graph without nodes.
const NO_ENTRY: u32 = u32::MAX;

/// The construction parameters an image was built with (compared with the configuration to
/// decide whether a loaded shard is compacted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuildParams {
    /// HNSW M.
    pub max_connections: usize,
    /// HNSW ef at construction.
    pub ef_construction: usize,
}

/// A decoded image.
#[derive(Debug)]
pub struct DecodedVectors {
    /// The index: the image's graphs sealed but the last, which takes later inserts.
    pub index: VectorIndex,
    /// Chunk position of every slot ([`NO_CHUNK`] for a dead slot).
    pub chunk_positions: Vec<u32>,
    /// What the graphs were built with.
    pub built_with: BuildParams,
}

impl VectorIndex {
    /// The image of this index with `chunk_positions[s]` recorded for slot `s` (one per slot).
    pub fn encode_image(&self, chunk_positions: &[u32]) -> Vec<u8> {
        self.encode_image_version(chunk_positions, GRAPH_VERSION)
    }

    /// [`VectorIndex::encode_image`] in format `version` (1 or 2; tests write version 1 to
    /// check that it still loads).
    fn encode_image_version(&self, chunk_positions: &[u32], version: u32) -> Vec<u8> {
        debug_assert!(version == 1 || version == 2, "graph image version {version}");
        assert_eq!(chunk_positions.len(), self.len(), "one chunk position per slot");
        let dimension = self.dimension();
        let live = (self.live.nodes() > 0).then(|| self.live.to_frozen());
        let graphs: Vec<&FrozenGraph> = self.sealed.iter().chain(live.as_ref()).collect();
        let adjacency: usize = graphs
            .iter()
            .flat_map(|graph| graph.layer_parts())
            .map(|(offsets, neighbours)| 4 * (1 + offsets.len() + neighbours.len()))
            .sum();
        let component_bytes = if version == 1 { 4 } else { 2 };
        let mut out =
            Vec::with_capacity(80 + self.len() * (8 + component_bytes * dimension) + adjacency + 12 * graphs.len());
        out.extend_from_slice(GRAPH_MAGIC);
        put_u32(&mut out, version);
        put_u32(&mut out, to_u32(dimension));
        put_u32(&mut out, to_u32(self.params.max_connections));
        put_u32(&mut out, to_u32(self.params.ef_construction));
        out.push(u8::from(self.costs.is_some()));
        let costs = self.costs.unwrap_or(PlannerCosts {
            scan_ns_per_vector: 0.0,
            walk_ns_per_evaluation: 0.0,
            walk_evaluations_unfiltered: 0.0,
            walk_growth: 0.0,
        });
        for value in [
            costs.scan_ns_per_vector,
            costs.walk_ns_per_evaluation,
            costs.walk_evaluations_unfiltered,
            costs.walk_growth,
        ] {
            out.extend_from_slice(&value.to_le_bytes());
        }
        out.extend_from_slice(&(self.calibrated_len as u64).to_le_bytes());
        put_u32(&mut out, to_u32(self.len()));
        for (ordinal, position) in self.store.ordinals().iter().zip(chunk_positions) {
            put_u32(&mut out, *ordinal);
            put_u32(&mut out, *position);
        }
        for slot in 0..self.len() as Slot {
            for &bits in self.row(slot) {
                if version == 1 {
                    // Widened to f32 (exact).
                    out.extend_from_slice(&widen(bits).to_le_bytes());
                } else {
                    out.extend_from_slice(&bits.to_le_bytes());
                }
            }
        }
        put_u32(&mut out, to_u32(graphs.len()));
        for graph in graphs {
            put_u32(&mut out, to_u32(graph.nodes()));
            put_u32(&mut out, graph.entry().unwrap_or(NO_ENTRY));
            let layers: Vec<(&[u32], &[Slot])> = graph.layer_parts().collect();
            put_u32(&mut out, to_u32(layers.len()));
            for (offsets, neighbours) in layers {
                put_u32(&mut out, to_u32(neighbours.len()));
                for value in offsets.iter().chain(neighbours) {
                    put_u32(&mut out, *value);
                }
            }
        }
        out
    }

    /// Decodes an image written by [`VectorIndex::encode_image`] into an index searched with
    /// `params` (whose dimension must be the image's); the image's graphs become sealed graphs
    /// and later inserts go to a fresh graph built with `params`. The error says what is wrong.
    pub fn decode_image(bytes: &[u8], params: VectorParams) -> Result<DecodedVectors, String> {
        let mut reader = Reader::new(bytes);
        if reader.take(GRAPH_MAGIC.len())? != GRAPH_MAGIC {
            return Err("not a graph image (magic bytes differ)".into());
        }
        let version = reader.u32()?;
        if version != 1 && version != GRAPH_VERSION {
            return Err(format!("graph image version {version}; this build reads versions 1 and {GRAPH_VERSION}"));
        }
        let dimension = reader.u32()? as usize;
        if dimension != params.dimension {
            return Err(format!("dimension {dimension}, the index expects {}", params.dimension));
        }
        let max_connections = reader.u32()? as usize;
        let ef_construction = reader.u32()? as usize;
        if !(2..=super::MAX_CONNECTIONS_LIMIT).contains(&max_connections) || ef_construction == 0 {
            return Err(format!("build parameters M={max_connections} ef_construction={ef_construction} are invalid"));
        }
        let has_costs = match reader.take(1)?[0] {
            0 => false,
            1 => true,
            other => return Err(format!("cost flag {other} is neither 0 nor 1")),
        };
        let values = [reader.f64()?, reader.f64()?, reader.f64()?, reader.f64()?];
        if values.iter().any(|value| !value.is_finite() || *value < 0.0) {
            return Err("planner costs are negative or not finite".into());
        }
        let costs = has_costs.then_some(PlannerCosts {
            scan_ns_per_vector: values[0].max(f64::MIN_POSITIVE),
            walk_ns_per_evaluation: values[1].max(f64::MIN_POSITIVE),
            walk_evaluations_unfiltered: values[2],
            walk_growth: values[3].min(1.0),
        });
        let calibrated_len = reader.u64()?;
        let slots = reader.u32()? as usize;
        if calibrated_len > slots as u64 {
            return Err(format!("calibrated at {calibrated_len} vectors, holds {slots}"));
        }
        // Every slot needs 8 bytes of table and 4 (version 1) or 2 per component: check before
        // allocating.
        let component_bytes = if version == 1 { 4 } else { 2 };
        reader.ensure(slots, 8 + component_bytes * dimension)?;
        let mut ordinals = Vec::with_capacity(slots);
        let mut chunk_positions = Vec::with_capacity(slots);
        for _ in 0..slots {
            ordinals.push(reader.u32()?);
            chunk_positions.push(reader.u32()?);
        }
        let stride = VectorStore::stride(dimension);
        let mut vectors = advised_rows(slots * stride);
        // Version 1's f32 components are read into this before rounding.
        let mut row = if version == 1 { vec![0f32; dimension] } else { Vec::new() };
        for slot in 0..slots {
            let halves: &mut [Half] = bytemuck::cast_slice_mut(&mut vectors[slot * stride..(slot + 1) * stride]);
            if version == 1 {
                for value in &mut row {
                    *value = f32::from_le_bytes(reader.array()?);
                    if !fits_half(*value) {
                        return Err(format!("vector of slot {slot} is not finite or beyond ±65504"));
                    }
                }
                to_half(&row, &mut halves[..dimension]);
            } else {
                for half in &mut halves[..dimension] {
                    *half = u16::from_le_bytes(reader.array()?);
                    if !half_is_finite(*half) {
                        return Err(format!("vector of slot {slot} is not finite"));
                    }
                }
            }
        }
        let graph_count = reader.u32()? as usize;
        // Each graph takes at least 12 bytes.
        reader.ensure(graph_count, 12)?;
        let mut sealed = Vec::with_capacity(graph_count);
        let mut base = 0usize;
        for number in 0..graph_count {
            let nodes = reader.u32()? as usize;
            if nodes == 0 || nodes > slots - base {
                return Err(format!("graph {number} has {nodes} nodes, {} slots are left", slots - base));
            }
            let entry = reader.u32()?;
            let entry = (entry != NO_ENTRY).then_some(entry);
            let layer_count = reader.u32()? as usize;
            if layer_count > MAX_LAYER + 1 {
                return Err(format!("graph {number} has {layer_count} layers, at most {} exist", MAX_LAYER + 1));
            }
            let mut layers = Vec::with_capacity(layer_count);
            for _ in 0..layer_count {
                let neighbours = reader.u32()? as usize;
                reader.ensure(nodes + 1 + neighbours, 4)?;
                let offsets = (0..=nodes).map(|_| reader.u32()).collect::<Result<Vec<u32>, String>>()?;
                let lists = (0..neighbours).map(|_| reader.u32()).collect::<Result<Vec<u32>, String>>()?;
                layers.push((offsets, lists));
            }
            let graph = FrozenGraph::from_parts(base as Slot, nodes, entry, layers)
                .map_err(|reason| format!("graph {number}: {reason}"))?;
            sealed.push(graph);
            base += nodes;
        }
        if base != slots {
            return Err(format!("graphs cover {base} of {slots} slots"));
        }
        if reader.at != bytes.len() {
            return Err(format!("{} trailing bytes after the last graph", bytes.len() - reader.at));
        }
        let mut index = VectorIndex::new(params);
        index.store = VectorStore::from_rows(dimension, vectors, ordinals);
        // The last graph takes inserts again (so restarts do not pile up graphs), unless its
        // lists exceed this index's capacity (built with a larger M): then a fresh one does.
        let live_connections = VectorIndex::live_connections(&index.params);
        let revived =
            sealed.last().and_then(|last| LiveGraph::from_frozen(last, live_connections, index.params.ef_construction));
        index.live = match revived {
            Some(live) => {
                sealed.pop();
                live
            }
            None => VectorIndex::live_graph(&index.params, slots as Slot),
        };
        index.sealed = sealed;
        index.loaded_graphs = graph_count;
        index.costs = costs;
        index.calibrated_len = calibrated_len as usize;
        // A version 1 image's costs were measured on f32 rows, which scan and walk slower than
        // the binary16 rows now held: measured again, once, on what this index reads.
        if version == 1 && index.costs.is_some() {
            index.calibrate();
        }
        Ok(DecodedVectors { index, chunk_positions, built_with: BuildParams { max_connections, ef_construction } })
    }

    /// Number of graphs a search walks (sealed ones plus the live one when it has nodes).
    pub fn graph_count(&self) -> usize {
        self.sealed.len() + usize::from(self.live.nodes() > 0)
    }

    /// Number of sealed (loaded, read-only) graphs.
    pub fn sealed_graphs(&self) -> usize {
        self.sealed.len()
    }

    /// Number of graphs this index was decoded with (0 when it was built by inserts).
    pub fn loaded_graphs(&self) -> usize {
        self.loaded_graphs
    }
}

fn to_u32(value: usize) -> u32 {
    u32::try_from(value).expect("index sizes fit u32 (slots are u32)")
}

fn put_u32(out: &mut Vec<u8>, value: u32) {
    out.extend_from_slice(&value.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    use roaring::RoaringBitmap;

    use super::super::tests::{brute_force, build, params, unit_vector};
    use super::super::{GraphWalk, VectorStrategy};
    use super::*;
    use crate::domain::DocOrdinal;
    use crate::index::Hit;

    fn round_trip(index: &VectorIndex) -> VectorIndex {
        let positions: Vec<u32> = (0..index.len() as u32).collect();
        let decoded = VectorIndex::decode_image(&index.encode_image(&positions), *index.params()).expect("decodes");
        assert_eq!(decoded.chunk_positions, positions);
        decoded.index
    }

    /// Planner costs no calibration would measure, with a scan cost of `scan_ns_per_vector`.
    fn costs(scan_ns_per_vector: f64) -> PlannerCosts {
        PlannerCosts {
            scan_ns_per_vector,
            walk_ns_per_evaluation: 30.0,
            walk_evaluations_unfiltered: 700.0,
            walk_growth: 0.4,
        }
    }

    fn bits(hits: &[Hit]) -> Vec<(Slot, u32)> {
        hits.iter().map(|hit| (hit.slot, hit.score.to_bits())).collect()
    }

    fn recall(index: &VectorIndex, queries: &[Vec<f32>], allowed: &RoaringBitmap) -> usize {
        queries
            .iter()
            .map(|query| {
                let truth = brute_force(index, query, 10, allowed);
                index.search(query, 10, allowed).hits.iter().filter(|hit| truth.contains(hit)).count()
            })
            .sum()
    }

    #[test]
    fn decoded_graph_searches_exactly_like_its_original() {
        let mut original = build(params(16, 0, 0.0), 3000, 2, 61);
        original.set_planner_costs(Some(costs(1.5)));
        let decoded = round_trip(&original);
        assert_eq!(decoded.planner_costs(), original.planner_costs());
        // The one graph came back as the live graph.
        assert_eq!((decoded.sealed_graphs(), decoded.graph_count()), (0, 1));
        let mut rng = SmallRng::seed_from_u64(62);
        let queries: Vec<Vec<f32>> = (0..40).map(|_| unit_vector(&mut rng, 16)).collect();
        for modulus in [1u32, 2, 7, 40] {
            let allowed: RoaringBitmap = (0..1500u32).filter(|ordinal| ordinal % modulus == 0).collect();
            for query in &queries {
                let expected = original.search(query, 10, &allowed);
                let got = decoded.search(query, 10, &allowed);
                assert_eq!(bits(&got.hits), bits(&expected.hits), "modulus {modulus}");
                assert_eq!(got.report, expected.report);
            }
            assert_eq!(recall(&decoded, &queries, &allowed), recall(&original, &queries, &allowed));
        }
        // The image of a decoded index is the image it came from.
        let positions: Vec<u32> = (0..original.len() as u32).collect();
        assert_eq!(decoded.encode_image(&positions), original.encode_image(&positions));
    }

    /// A version 1 image (f32 rows, written before the rows were binary16) loads into the same
    /// index as the version 2 image of the same index: same rows, same searches, and its
    /// version 2 image is the one the original writes. Version 2 is the smaller.
    #[test]
    fn a_version_1_image_loads_like_its_version_2_image() {
        let original = build(params(16, 0, 0.0), 2000, 2, 71);
        let positions: Vec<u32> = (0..original.len() as u32).collect();
        let (old, new) = (original.encode_image_version(&positions, 1), original.encode_image(&positions));
        assert_eq!(old.len() - new.len(), 2 * 16 * original.len());
        let from_old = VectorIndex::decode_image(&old, *original.params()).expect("version 1 decodes").index;
        let from_new = VectorIndex::decode_image(&new, *original.params()).expect("version 2 decodes").index;
        for slot in 0..original.len() as Slot {
            assert_eq!(from_old.row(slot), original.row(slot));
            assert_eq!(from_new.row(slot), original.row(slot));
        }
        let everything: RoaringBitmap = (0..2000u32).collect();
        let query = original.vector(3);
        assert_eq!(
            bits(&from_old.search(&query, 10, &everything).hits),
            bits(&from_new.search(&query, 10, &everything).hits)
        );
        assert_eq!(from_old.encode_image(&positions), new);
    }

    /// A version 1 image's planner costs (measured on f32 rows) are measured again on load; a
    /// version 2 image's are kept.
    #[test]
    fn a_version_1_images_costs_are_measured_again() {
        let mut original = build(params(16, 0, 0.0), 600, 2, 73);
        let stale = costs(12345.0);
        original.set_planner_costs(Some(stale));
        let positions: Vec<u32> = (0..original.len() as u32).collect();
        let decode = |version| {
            VectorIndex::decode_image(&original.encode_image_version(&positions, version), *original.params())
                .expect("decodes")
                .index
        };
        assert_eq!(decode(2).planner_costs(), Some(stale));
        let measured = decode(1).planner_costs().expect("measured again");
        assert_ne!(measured.scan_ns_per_vector, stale.scan_ns_per_vector);
    }

    /// A binary16 component that is infinite or NaN is refused, naming its slot.
    #[test]
    fn a_non_finite_binary16_component_is_refused() {
        let original = build(params(8, 0, 0.0), 20, 1, 72);
        let positions: Vec<u32> = (0..original.len() as u32).collect();
        let mut image = original.encode_image(&positions);
        // The rows follow the 69-byte header, the slot count and 8 bytes of table per slot.
        let row_start = 8 + 4 + 4 * 3 + 1 + 4 * 8 + 8 + 4 + 8 * original.len();
        let component = row_start + 2 * (8 * 5 + 3);
        image[component..component + 2].copy_from_slice(&0x7e00u16.to_le_bytes());
        let error = VectorIndex::decode_image(&image, *original.params()).expect_err("NaN refused");
        assert_eq!(error, "vector of slot 5 is not finite");
    }

    /// Inserts after a load extend the image's last graph, so loads do not pile up graphs; a
    /// graph whose lists exceed the loading index's M stays sealed and a fresh graph takes the
    /// inserts. Every search walks all graphs under the same scope.
    #[test]
    fn inserts_after_one_and_two_loads_are_found() {
        for smaller_m in [false, true] {
            inserts_after_loads_are_found(smaller_m);
        }
    }

    fn inserts_after_loads_are_found(smaller_m: bool) {
        let mut rng = SmallRng::seed_from_u64(71);
        let mut index = build(params(8, 0, 0.0), 800, 1, 70);
        let loaded_with = VectorParams { max_connections: if smaller_m { 4 } else { 16 }, ..*index.params() };
        for load in 1..=2usize {
            let positions: Vec<u32> = (0..index.len() as u32).collect();
            index = VectorIndex::decode_image(&index.encode_image(&positions), loaded_with).expect("decodes").index;
            // With a smaller M the M = 16 graph stays sealed; the M = 4 graph inserted after the
            // first load revives at the second.
            assert_eq!(index.sealed_graphs(), usize::from(smaller_m), "load {load}");
            let first = index.len();
            let items: Vec<(Slot, DocOrdinal, Vec<f32>)> =
                (first..first + 300).map(|slot| (slot as Slot, slot as DocOrdinal, unit_vector(&mut rng, 8))).collect();
            index.insert_batch(&items).expect("insert after a load");
            assert_eq!(index.graph_count(), 1 + usize::from(smaller_m), "load {load}");
            let everything: RoaringBitmap = (0..index.len() as u32).collect();
            let odd: RoaringBitmap = (0..index.len() as u32).filter(|ordinal| ordinal % 2 == 1).collect();
            // Every vector, old or new, finds itself.
            for slot in (0..index.len() as Slot).step_by(37) {
                let query = index.vector(slot);
                let search = index.search(&query, 1, &everything);
                assert_eq!(search.report.strategy, VectorStrategy::Graph);
                assert_eq!(search.hits[0].slot, slot);
            }
            let queries: Vec<Vec<f32>> = (0..30).map(|_| unit_vector(&mut rng, 8)).collect();
            for query in &queries {
                let search = index.search(query, 10, &odd);
                assert!(search.hits.iter().all(|hit| odd.contains(index.doc_ordinal(hit.slot))));
            }
            let found = recall(&index, &queries, &odd);
            assert!(found >= 30 * 10 * 9 / 10, "recall {found} of 300 after {load} loads");
        }
        // The benchmark walks see every vector too.
        let query = index.vector(5);
        let everything: RoaringBitmap = (0..index.len() as u32).collect();
        let reference = index.hnsw_rs_reference();
        for walk in [GraphWalk::HnswRs(&reference), GraphWalk::BestFirst(&reference), GraphWalk::Frozen] {
            assert_eq!(index.search_with(&query, 1, &everything, walk).hits[0].slot, 5, "{walk:?}");
        }
    }

    #[test]
    fn every_truncation_of_a_graph_image_is_refused() {
        let index = build(params(4, 0, 0.0), 60, 2, 81);
        let positions: Vec<u32> = (0..60).map(|slot| if slot % 5 == 0 { NO_CHUNK } else { slot }).collect();
        let bytes = index.encode_image(&positions);
        assert!(VectorIndex::decode_image(&bytes, *index.params()).is_ok());
        for length in 0..bytes.len() {
            assert!(VectorIndex::decode_image(&bytes[..length], *index.params()).is_err(), "{length} bytes accepted");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(VectorIndex::decode_image(&longer, *index.params()).is_err());
        let other_dimension = VectorParams { dimension: 5, ..*index.params() };
        assert!(VectorIndex::decode_image(&bytes, other_dimension).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Mutated images never panic the decoder, and whatever decodes keeps every search
        /// inside its scope.
        #[test]
        fn mutated_graph_images_never_panic_nor_leave_the_scope(
            seed in any::<u64>(),
            mutations in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
            allowed_ordinals in proptest::collection::vec(0u32..60, 0..40),
        ) {
            let index = build(params(4, 0, 0.0), 120, 2, seed);
            let positions: Vec<u32> = (0..120).collect();
            let mut bytes = index.encode_image(&positions);
            for (at, value) in &mutations {
                let position = at.index(bytes.len());
                bytes[position] = *value;
            }
            if let Ok(decoded) = VectorIndex::decode_image(&bytes, *index.params()) {
                let mut decoded = decoded.index;
                // A decoded graph takes inserts (its last graph is live again) without panicking.
                let first = decoded.len();
                let mut rng = SmallRng::seed_from_u64(seed ^ 1);
                let items: Vec<(Slot, DocOrdinal, Vec<f32>)> =
                    (first..first + 20).map(|slot| (slot as Slot, (slot % 60) as DocOrdinal, unit_vector(&mut rng, 4))).collect();
                decoded.insert_batch(&items).expect("valid inserts");
                let reference = decoded.hnsw_rs_reference();
                let allowed: RoaringBitmap = allowed_ordinals.into_iter().collect();
                let mut rng = SmallRng::seed_from_u64(seed);
                for _ in 0..4 {
                    let query = unit_vector(&mut rng, 4);
                    let k = rng.gen_range(1..20);
                    for walk in [GraphWalk::Frozen, GraphWalk::BestFirst(&reference)] {
                        let search = decoded.search_with(&query, k, &allowed, walk);
                        prop_assert!(search.hits.len() <= k);
                        prop_assert!(search.hits.iter().all(|hit| allowed.contains(decoded.doc_ordinal(hit.slot))));
                    }
                }
            }
        }
    }
}
