//! [`ReuseWatch`]: which early-freed held sources had a block given to
//! another request since.
//!
//! vLLM's prefill worker frees a held request's blocks when its lease runs
//! out (`nixl/base_worker.py`, `_get_new_notifs`) whether or not its reader
//! has read them; the reader's NIXL read then returns whatever the blocks
//! hold. Freed blocks join the back of the free queue
//! (`BlockPool.free_blocks`), keeping their content until
//! `BlockPool.get_new_blocks` hands them to another request. A read that
//! ends before that read the source's own KV; one that ends after read
//! another request's. The pool notes the first reallocation of any block of
//! a watched source, so the driver can tell the two apart.

use handoff_core::fasthash::FastMap;
use handoff_core::HandoffId;

/// Blocks of early-freed sources, by block, and the sources found reused.
/// At most one entry per block of the pool: a block watched again belongs
/// to its newer source.
#[derive(Clone, Debug, Default)]
pub(crate) struct ReuseWatch {
    by_block: FastMap<u32, HandoffId>,
    by_source: FastMap<HandoffId, Vec<u32>>,
    reused: Vec<HandoffId>,
}

impl ReuseWatch {
    /// Whether any block is watched (allocation checks nothing otherwise).
    #[inline]
    pub(crate) fn active(&self) -> bool {
        !self.by_block.is_empty()
    }

    /// Watches `blocks`, about to be freed by source `id`.
    pub(crate) fn watch(&mut self, id: HandoffId, blocks: &[u32]) {
        for &b in blocks {
            if let Some(old) = self.by_block.insert(b, id) {
                if old != id {
                    self.unlink(old, b);
                }
            }
        }
        if !blocks.is_empty() {
            self.by_source.insert(id, blocks.to_vec());
        }
    }

    /// Block `b` was given to a new owner: its source, if watched, is
    /// reused, and none of that source's blocks is watched any more.
    pub(crate) fn allocated(&mut self, b: u32) {
        let Some(id) = self.by_block.remove(&b) else {
            return;
        };
        for other in self.by_source.remove(&id).unwrap_or_default() {
            if self.by_block.get(&other) == Some(&id) {
                self.by_block.remove(&other);
            }
        }
        self.reused.push(id);
    }

    /// Moves the sources found reused into `out`.
    pub(crate) fn drain(&mut self, out: &mut Vec<HandoffId>) {
        out.append(&mut self.reused);
    }

    fn unlink(&mut self, id: HandoffId, b: u32) {
        if let Some(v) = self.by_source.get_mut(&id) {
            v.retain(|x| *x != b);
            if v.is_empty() {
                self.by_source.remove(&id);
            }
        }
    }

    /// Entries held (tests: bounded by the pool).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_block.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_reallocation_reports_its_source_once() {
        let mut w = ReuseWatch::default();
        w.watch(HandoffId(1), &[3, 4]);
        w.watch(HandoffId(2), &[5]);
        w.allocated(9);
        w.allocated(4);
        w.allocated(3);
        let mut out = Vec::new();
        w.drain(&mut out);
        assert_eq!(out, vec![HandoffId(1)]);
        assert_eq!(w.len(), 1);
    }

    #[test]
    fn a_block_watched_again_belongs_to_its_newer_source() {
        let mut w = ReuseWatch::default();
        w.watch(HandoffId(1), &[3]);
        w.watch(HandoffId(2), &[3]);
        w.allocated(3);
        let mut out = Vec::new();
        w.drain(&mut out);
        assert_eq!(out, vec![HandoffId(2)]);
        assert_eq!(w.len(), 0);
        assert!(w.by_source.is_empty());
    }
}
