//! How one handoff's KV moves between a prefill worker and a decode worker
//! of different tensor parallelism: which ranks exchange KV, how many
//! transfers that makes and what each carries.
//!
//! Every rank holds the KV heads of its slice (`kv_heads / tp` of them,
//! replicated when TP exceeds the heads), so a decode rank fills its pool
//! from the prefill ranks whose head slices overlap its own:
//!
//! - **vLLM** (NIXL connector, pull): the decode rank reads.
//!   `vllm/distributed/kv_transfer/kv_connector/utils.py`,
//!   `TpKVTopology.tp_ratio` (decode TP ÷ prefill TP, negative when the
//!   prefill's is larger) and `get_target_remote_ranks`: with decode TP ≥
//!   prefill TP decode rank `r` reads its heads from prefill rank
//!   `r / tp_ratio` (one read, a slice of that rank's blocks); with prefill
//!   TP > decode TP it reads from the `|tp_ratio|` prefill ranks
//!   `r·|tp_ratio| + i`, one read of each (`NixlConnectorWorker`'s
//!   `_read_blocks_for_req` posts one transfer per remote rank, each its
//!   own handle and notification). vLLM requires one TP to divide the
//!   other (the CLI refuses the rest).
//! - **SGLang** (mooncake/NIXL, destination-first): the prefill rank writes.
//!   `python/sglang/srt/disaggregation/mooncake/conn.py`,
//!   `MooncakeKVManager.send_kvcache_slice` (and `nixl/conn.py`'s): when the
//!   TPs differ each prefill rank sends the head slice of every decode rank
//!   its heads overlap, one send per (prefill rank, decode rank) pair (the
//!   decode side asks `required_dst_info_num` of them); M-to-N in general.
//!
//! Either way the same KV crosses — what the decode pool holds of a token,
//! all its ranks together — split into `P + D − gcd(P, D)` transfers
//! (`max(P, D)` when one divides the other; one per rank pair, as today,
//! when equal). The issuing rank (decode under pull, prefill under push)
//! posts its transfers one after another and each pays the model's setup
//! latency; issuing ranks work in parallel, and the bytes cross the
//! worker's link at its bandwidth as before, so a handoff takes
//! `setup × transfers per issuing rank + bytes ÷ bandwidth`.

/// Which side of a handoff posts the transfers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FanIssuer {
    /// The decode rank reads (vLLM's NIXL pull, source-first).
    #[default]
    Decode,
    /// The prefill rank writes (SGLang destination-first; vLLM's push).
    Prefill,
}

/// Most ranks one side may have (bounds the fan's arithmetic).
pub const MAX_FAN_TP: u32 = 4096;

/// The ranks of the two sides of a handoff and who posts the transfers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RankFan {
    /// Tensor-parallel ranks of a prefill worker.
    prefill_tp: u32,
    /// Tensor-parallel ranks of a decode worker.
    decode_tp: u32,
    /// Who posts.
    issuer: FanIssuer,
}

impl Default for RankFan {
    fn default() -> Self {
        RankFan::UNIFORM
    }
}

impl RankFan {
    /// Both sides at one TP: one transfer per rank pair, charged as one.
    pub const UNIFORM: RankFan = RankFan {
        prefill_tp: 1,
        decode_tp: 1,
        issuer: FanIssuer::Decode,
    };

    /// The fan between `prefill_tp` and `decode_tp` ranks (each clamped to
    /// `1..=`[`MAX_FAN_TP`]), posted by `issuer`.
    pub fn new(prefill_tp: u32, decode_tp: u32, issuer: FanIssuer) -> RankFan {
        RankFan {
            prefill_tp: prefill_tp.clamp(1, MAX_FAN_TP),
            decode_tp: decode_tp.clamp(1, MAX_FAN_TP),
            issuer,
        }
    }

    /// Prefill ranks.
    pub fn prefill_tp(&self) -> u32 {
        self.prefill_tp
    }

    /// Decode ranks.
    pub fn decode_tp(&self) -> u32 {
        self.decode_tp
    }

    /// Whether both sides have the same TP (the fan changes nothing).
    pub fn is_uniform(&self) -> bool {
        self.prefill_tp == self.decode_tp
    }

    /// Whether one TP divides the other (vLLM's `TpKVTopology.tp_ratio`
    /// requires it).
    pub fn divides(&self) -> bool {
        let (lo, hi) = self.lo_hi();
        hi % lo == 0
    }

    fn lo_hi(&self) -> (u32, u32) {
        (
            self.prefill_tp.min(self.decode_tp),
            self.prefill_tp.max(self.decode_tp),
        )
    }

    /// The counterpart ranks issuing rank `i` exchanges KV with: those
    /// whose head slices overlap its own (heads split evenly over each
    /// side's ranks).
    pub fn partners(&self, i: u32) -> std::ops::Range<u32> {
        let (n, m) = self.issuer_and_counterpart();
        let i = u64::from(i.min(n - 1));
        let (n, m) = (u64::from(n), u64::from(m));
        // Issuing rank i covers [i·m, (i+1)·m) of n·m head units;
        // counterpart j covers [j·n, (j+1)·n).
        let first = i * m / n;
        let last = ((i + 1) * m - 1) / n;
        first as u32..last as u32 + 1
    }

    /// (issuing side's ranks, counterpart's ranks).
    fn issuer_and_counterpart(&self) -> (u32, u32) {
        match self.issuer {
            FanIssuer::Decode => (self.decode_tp, self.prefill_tp),
            FanIssuer::Prefill => (self.prefill_tp, self.decode_tp),
        }
    }

    /// Transfers one handoff makes: one per (prefill rank, decode rank)
    /// pair whose head slices overlap, `P + D − gcd(P, D)`.
    pub fn transfers(&self) -> u32 {
        let (p, d) = (self.prefill_tp, self.decode_tp);
        p + d - gcd(p, d)
    }

    /// Transfers the busiest issuing rank posts one after another (each
    /// pays the setup latency): `max(1, counterpart ÷ issuer)` when one
    /// divides the other.
    pub fn per_issuing_rank(&self) -> u32 {
        let (n, m) = self.issuer_and_counterpart();
        if m % n == 0 || n % m == 0 {
            return (m / n).max(1);
        }
        (0..n)
            .map(|i| self.partners(i).len() as u32)
            .max()
            .unwrap_or(1)
    }

    /// Bytes each transfer carries of a handoff of `total` bytes (equal
    /// shares when one TP divides the other; the mean otherwise).
    pub fn bytes_per_transfer(&self, total: f64) -> f64 {
        total / f64::from(self.transfers())
    }

    /// The setup a handoff pays on its critical path: `base` once per
    /// transfer of the busiest issuing rank (exactly `base` when uniform).
    pub fn setup(&self, base: handoff_core::time::Duration) -> handoff_core::time::Duration {
        match self.per_issuing_rank() {
            1 => base,
            k => base.saturating_mul(k),
        }
    }
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use handoff_core::time::Duration;

    #[test]
    fn vllm_decode_ranks_read_as_get_target_remote_ranks() {
        // Prefill TP1, decode TP2 (tp_ratio 2): each decode rank reads its
        // half of the heads from prefill rank 0, one read each.
        let f = RankFan::new(1, 2, FanIssuer::Decode);
        assert_eq!((f.partners(0), f.partners(1)), (0..1, 0..1));
        assert_eq!((f.transfers(), f.per_issuing_rank()), (2, 1));
        assert_eq!(f.bytes_per_transfer(1000.0), 500.0);
        let ms = Duration::from_millis(10);
        assert_eq!(f.setup(ms), ms);
        // Prefill TP2, decode TP1 (tp_ratio -2): the decode rank reads
        // from prefill ranks 0 and 1, one after another.
        let f = RankFan::new(2, 1, FanIssuer::Decode);
        assert_eq!(f.partners(0), 0..2);
        assert_eq!((f.transfers(), f.per_issuing_rank()), (2, 2));
        assert_eq!(f.bytes_per_transfer(1000.0), 500.0);
        assert_eq!(f.setup(ms), Duration::from_millis(20));
        // Prefill TP2, decode TP8: decode rank r reads from r / 4.
        let f = RankFan::new(2, 8, FanIssuer::Decode);
        let from: Vec<u32> = (0..8).map(|r| f.partners(r).start).collect();
        assert_eq!(from, [0, 0, 0, 0, 1, 1, 1, 1]);
        assert_eq!((f.transfers(), f.per_issuing_rank()), (8, 1));
    }

    #[test]
    fn sglang_prefill_ranks_send_a_slice_to_each_overlapping_decode_rank() {
        // Prefill TP1 writes both decode ranks' slices.
        let f = RankFan::new(1, 2, FanIssuer::Prefill);
        assert_eq!(f.partners(0), 0..2);
        assert_eq!((f.transfers(), f.per_issuing_rank()), (2, 2));
        // Prefill TP4 into decode TP2: ranks 0, 1 into 0; 2, 3 into 1.
        let f = RankFan::new(4, 2, FanIssuer::Prefill);
        let to: Vec<_> = (0..4).map(|r| f.partners(r)).collect();
        assert_eq!(to, [0..1, 0..1, 1..2, 1..2]);
        assert_eq!((f.transfers(), f.per_issuing_rank()), (4, 1));
        // M-to-N: 2 into 3 overlaps 4 pairs; prefill rank 0 sends to 0, 1.
        let f = RankFan::new(2, 3, FanIssuer::Prefill);
        assert!(!f.divides());
        assert_eq!((f.partners(0), f.partners(1)), (0..2, 1..3));
        assert_eq!((f.transfers(), f.per_issuing_rank()), (4, 2));
    }

    #[test]
    fn equal_tps_change_nothing() {
        for tp in [1, 2, 8] {
            for issuer in [FanIssuer::Decode, FanIssuer::Prefill] {
                let f = RankFan::new(tp, tp, issuer);
                assert!(f.is_uniform() && f.divides());
                assert_eq!((f.transfers(), f.per_issuing_rank()), (tp, 1));
                assert_eq!(f.setup(Duration::from_millis(7)), Duration::from_millis(7));
            }
        }
        assert!(RankFan::default().is_uniform());
    }

    proptest::proptest! {
        /// Any TPs: the pairs each side sees add up to the same count, and
        /// every counterpart rank is someone's partner.
        #[test]
        fn the_fan_is_consistent(p in 0u32..80, d in 0u32..80, pull in proptest::bool::ANY) {
            let issuer = if pull { FanIssuer::Decode } else { FanIssuer::Prefill };
            let f = RankFan::new(p, d, issuer);
            let (n, m) = f.issuer_and_counterpart();
            let pairs: u32 = (0..n).map(|i| f.partners(i).len() as u32).sum();
            proptest::prop_assert_eq!(pairs, f.transfers());
            proptest::prop_assert_eq!(f.partners(0).start, 0);
            proptest::prop_assert_eq!(f.partners(n - 1).end, m);
            proptest::prop_assert!(f.per_issuing_rank() >= 1);
        }
    }
}
