//! One block's state in one word ([`Block`]: free-queue position or
//! reference counts per [`Owner`], and whether it caches a hash), for the
//! block pool.

use crate::free_queue::{QueuePos, Queued};

/// Who holds a reference to a block. The order is the strength order used for
/// counting a shared block once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Owner {
    /// A running request, or a waiting one that already holds KV.
    Active = 0,
    /// A completed prefill held for its reader.
    Pinned = 1,
    /// A destination reservation not yet activated.
    Reserved = 2,
}

/// Bits of one owner's count in [`Refs`]: three of them fit below a
/// [`Block`] word's two flag bits.
const REF_BITS: u32 = 20;
/// The largest count [`Refs`] holds; counts saturate there, as the `u32`
/// counts they replaced did at theirs (a block's references are bounded by
/// the requests and handoffs alive on its worker, far below either).
pub(super) const REF_MAX: u64 = (1 << REF_BITS) - 1;

/// A block's reference counts per [`Owner`], packed into one word, the
/// strongest owner's in the low bits. A release or retag asks "is this
/// owner's the only reference?" on every block, which is one comparison of
/// the word with [`Refs::only`]; the strongest owner is the lowest non-zero
/// field, found from the word's trailing zeros.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Refs(pub(super) u64);

impl Refs {
    /// One reference, held by `o`.
    pub(super) const fn only(o: Owner) -> Refs {
        Refs(1 << (o as u32 * REF_BITS))
    }

    pub(super) fn get(self, o: usize) -> u32 {
        ((self.0 >> (o as u32 * REF_BITS)) & REF_MAX) as u32
    }

    pub(super) fn set(&mut self, o: usize, n: u32) {
        let shift = o as u32 * REF_BITS;
        let n = u64::from(n).min(REF_MAX);
        self.0 = (self.0 & !(REF_MAX << shift)) | (n << shift);
    }

    pub(super) fn strongest(self) -> Option<usize> {
        (self.0 != 0).then(|| (self.0.trailing_zeros() / REF_BITS) as usize)
    }

    pub(super) fn counts(self) -> [u32; 3] {
        [self.get(0), self.get(1), self.get(2)]
    }
}

/// [`Block::word`]: the block is in the free queue, and the low bits are its
/// queue sequence number.
pub(super) const QUEUED: u64 = 1 << 63;
/// [`Block::word`]: the block's entry in [`BlockPool`]'s `hashes` is the
/// hash it caches.
pub(super) const HASHED: u64 = 1 << 62;
/// [`Block::word`]'s low bits: the sequence number while queued, the
/// [`Refs`] otherwise.
pub(super) const LOW: u64 = HASHED - 1;

// Three counts fit below the flags.
const _: () = assert!(3 * REF_BITS <= 62);

/// One block's state but its hash, free-queue position included, in one
/// word, eight to a cache line: a release, retag or touch pass over a
/// request's blocks (mostly consecutive ids) costs an eighth of a line per
/// block, and churn that scatters them one line per free.
///
/// A queued block is unreferenced and a referenced one is never queued, so
/// the queue position and the reference counts share the word (`QUEUED`
/// says which it holds) next to the `HASHED` flag. The hash itself lives in
/// a parallel array (`BlockPool`'s `hashes`) that only publication and
/// eviction read or write: kept in the entry, it doubled the lines every
/// other pass loads.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
#[repr(transparent)]
pub(super) struct Block {
    pub(super) word: u64,
}

// Eight entries per cache line; a wider entry multiplies the passes'
// memory traffic.
const _: () = assert!(std::mem::size_of::<Block>() == 8);

impl Queued for Block {
    fn pos(&self) -> QueuePos {
        if self.word & QUEUED != 0 {
            QueuePos::at(self.word & LOW)
        } else {
            QueuePos::default()
        }
    }

    /// The queue moves only unreferenced blocks in and out, so the low bits
    /// it overwrites hold no counts.
    fn set_pos(&mut self, p: QueuePos) {
        debug_assert!(self.word & QUEUED != 0 || self.word & LOW == 0);
        self.word = (self.word & HASHED) | p.seq().map_or(0, |s| QUEUED | (s & LOW));
    }

    fn is_at(&self, seq: u64) -> bool {
        self.word & !HASHED == QUEUED | seq
    }
}

/// The position's ring sequence number depends on how often the ring was
/// compacted, not on the queue's order, so only whether the block is queued
/// is shown (test fingerprints compare cores reached by different paths);
/// the hash is shown by `BlockPool::fingerprint`.
impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Block")
            .field("hashed", &self.hashed())
            .field("refs", &self.refs().counts())
            .field("queued", &self.pos().is_queued())
            .finish()
    }
}

impl Block {
    pub(super) fn hashed(&self) -> bool {
        self.word & HASHED != 0
    }

    /// The reference counts; none while queued.
    pub(super) fn refs(&self) -> Refs {
        if self.word & QUEUED != 0 {
            Refs::default()
        } else {
            Refs(self.word & LOW)
        }
    }

    /// Replaces the counts of a block that is not queued.
    pub(super) fn set_refs(&mut self, r: Refs) {
        debug_assert!(self.word & QUEUED == 0);
        self.word = (self.word & HASHED) | r.0;
    }

    /// Whether `owner`'s one reference is the block's only one (never true
    /// of a queued block, whose word carries `QUEUED`).
    #[inline]
    pub(super) fn held_only_by(&self, owner: Owner) -> bool {
        self.word & !HASHED == ONLY[owner as usize].0
    }

    /// Makes a block just popped from the free queue `owner`'s: a queued
    /// block is unreferenced (`audit` checks it), so `owner` becomes its one
    /// reference. Returns whether it had a hash, which it evicts: that
    /// hash's canonical entry (a block carries a hash only while it is
    /// canonical: `publish` keeps it so, `audit` checks it).
    #[inline]
    pub(super) fn claim(&mut self, owner: Owner) -> bool {
        debug_assert!(self.word & !HASHED == 0);
        let hashed = self.hashed();
        self.word = ONLY[owner as usize].0;
        hashed
    }
}

/// A block's references when `owner` holds its only one: the common case of
/// every release and retag (a prefix shared between requests is the
/// exception), tested with one comparison before the general path.
pub(super) const ONLY: [Refs; 3] = [
    Refs::only(Owner::Active),
    Refs::only(Owner::Pinned),
    Refs::only(Owner::Reserved),
];
