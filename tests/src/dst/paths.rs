//! Which lifecycle paths a run reached ([`Paths`]).

use handoff_engine::fault::FaultCounts;

/// Lifecycle paths a run reached, summed over schedules in the report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Paths {
    /// Handoff attempts routed (source roles started).
    pub attempts: u64,
    /// Destinations that activated.
    pub activations: u64,
    /// Requests that finished.
    pub finished: u64,
    /// Requests that failed (including those torn down at the end).
    pub failed: u64,
    /// Roles that ended because their source lease expired.
    pub lease_expiries: u64,
    /// Roles that ended because their reservation expired.
    pub reservation_expiries: u64,
    /// Roles that ended by a client cancel.
    pub client_cancels: u64,
    /// Roles that ended because their peer aborted.
    pub peer_aborts: u64,
    /// Roles that ended because their peer was lost.
    pub peer_lost: u64,
    /// Roles that ended because their peer restarted.
    pub peer_restarted: u64,
    /// Roles that ended because a transfer failed.
    pub transfer_failures: u64,
    /// Destinations whose KV load failed (`kv-load-failed`: a failed
    /// transfer, or a stale read under the strict choice).
    pub kv_load_failures: u64,
    /// Destinations that activated from a read of released KV (vLLM's
    /// behaviour).
    pub stale_reads: u64,
    /// Of those, reads that ended after a released block was reused.
    pub stale_reads_reused: u64,
    /// Roles that ended as unsupported (a prompt no decode pool can hold).
    pub unsupported: u64,
    /// Roles that ended by a teardown (kill, restart or end of run).
    pub teardowns: u64,
    /// Reservation attempts that found no room (the attempt waited).
    pub reservation_waits: u64,
    /// Source leases a waiting destination renewed.
    pub lease_renewals: u64,
    /// Transfers started after their destination had already released.
    pub transfers_to_released: u64,
    /// Transfers started after their source had already released (its
    /// lease ran out; vLLM tells no reader): each ends as a stale read or,
    /// under the strict choice, a failed load.
    pub transfers_from_released: u64,
    /// Facts workers ignored as exact duplicates.
    pub duplicate_facts: u64,
    /// Facts for attempts already released (stale).
    pub stale_facts: u64,
    /// Facts from an older generation of their sender.
    pub old_generation_facts: u64,
    /// Facts that arrived before their attempt and were buffered.
    pub early_facts: u64,
    /// Buffered early facts whose attempt never came.
    pub early_dropped: u64,
    /// Requests routed to a worker that was down when they got there.
    pub undeliverable: u64,
    /// vLLM preemptions / SGLang retractions.
    pub preemptions: u64,
    /// Roles still alive when nothing was left to happen (torn down).
    pub torn_down_at_end: u64,
    /// KV events routers received out of id order (outputs of a step
    /// released after those of a later input).
    pub out_of_order_kv_events: u64,
}

impl Paths {
    pub(crate) fn add(&mut self, o: &Paths) {
        let Paths {
            attempts,
            activations,
            finished,
            failed,
            lease_expiries,
            reservation_expiries,
            client_cancels,
            peer_aborts,
            peer_lost,
            peer_restarted,
            transfer_failures,
            kv_load_failures,
            stale_reads,
            stale_reads_reused,
            unsupported,
            teardowns,
            reservation_waits,
            lease_renewals,
            transfers_to_released,
            transfers_from_released,
            duplicate_facts,
            stale_facts,
            old_generation_facts,
            early_facts,
            early_dropped,
            undeliverable,
            preemptions,
            torn_down_at_end,
            out_of_order_kv_events,
        } = *o;
        self.attempts += attempts;
        self.activations += activations;
        self.finished += finished;
        self.failed += failed;
        self.lease_expiries += lease_expiries;
        self.reservation_expiries += reservation_expiries;
        self.client_cancels += client_cancels;
        self.peer_aborts += peer_aborts;
        self.peer_lost += peer_lost;
        self.peer_restarted += peer_restarted;
        self.transfer_failures += transfer_failures;
        self.kv_load_failures += kv_load_failures;
        self.stale_reads += stale_reads;
        self.stale_reads_reused += stale_reads_reused;
        self.unsupported += unsupported;
        self.teardowns += teardowns;
        self.reservation_waits += reservation_waits;
        self.lease_renewals += lease_renewals;
        self.transfers_to_released += transfers_to_released;
        self.transfers_from_released += transfers_from_released;
        self.duplicate_facts += duplicate_facts;
        self.stale_facts += stale_facts;
        self.old_generation_facts += old_generation_facts;
        self.early_facts += early_facts;
        self.early_dropped += early_dropped;
        self.undeliverable += undeliverable;
        self.preemptions += preemptions;
        self.torn_down_at_end += torn_down_at_end;
        self.out_of_order_kv_events += out_of_order_kv_events;
    }

    /// `(name, count)` for every path, in a fixed order.
    pub fn rows(&self) -> [(&'static str, u64); 29] {
        [
            ("handoff attempts", self.attempts),
            ("destinations activated", self.activations),
            ("requests finished", self.finished),
            ("requests failed", self.failed),
            ("lease expiries", self.lease_expiries),
            ("reservation expiries", self.reservation_expiries),
            ("client cancels", self.client_cancels),
            ("peer aborts", self.peer_aborts),
            ("peer lost", self.peer_lost),
            ("peer restarted", self.peer_restarted),
            ("transfer failures", self.transfer_failures),
            ("failed KV loads", self.kv_load_failures),
            ("stale reads", self.stale_reads),
            ("stale reads of reused blocks", self.stale_reads_reused),
            ("unsupported", self.unsupported),
            ("teardowns", self.teardowns),
            ("reservation waits", self.reservation_waits),
            ("lease renewals", self.lease_renewals),
            (
                "transfers to released destinations",
                self.transfers_to_released,
            ),
            (
                "transfers from released sources",
                self.transfers_from_released,
            ),
            ("duplicate facts", self.duplicate_facts),
            ("stale facts", self.stale_facts),
            ("old-generation facts", self.old_generation_facts),
            ("early facts", self.early_facts),
            ("early facts dropped", self.early_dropped),
            ("undeliverable requests", self.undeliverable),
            ("preemptions", self.preemptions),
            ("roles torn down at the end", self.torn_down_at_end),
            ("out-of-order KV events", self.out_of_order_kv_events),
        ]
    }
}

/// Adds `b` into `a`, field by field.
pub fn add_counts(a: &mut FaultCounts, b: &FaultCounts) {
    let FaultCounts {
        kills,
        restarts,
        partitions,
        cancels,
        facts,
        facts_partitioned,
        facts_dropped,
        facts_duplicated,
        facts_delayed,
        transfers,
        transfers_failed,
    } = *b;
    a.kills += kills;
    a.restarts += restarts;
    a.partitions += partitions;
    a.cancels += cancels;
    a.facts += facts;
    a.facts_partitioned += facts_partitioned;
    a.facts_dropped += facts_dropped;
    a.facts_duplicated += facts_duplicated;
    a.facts_delayed += facts_delayed;
    a.transfers += transfers;
    a.transfers_failed += transfers_failed;
}
