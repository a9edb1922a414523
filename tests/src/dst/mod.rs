//! Deterministic simulation testing on the real cores.
//!
//! A *schedule* ([`schedule`]) is a whole disaggregated run drawn from one
//! seed: a deployment on the real vLLM or SGLang core (both handoff
//! orderings, tiny pools, short lease and reservation lifetimes so they
//! expire), a small trace (bursts to idle, shared prefixes, prompts that
//! barely fit or do not) and a fault plan from [`FaultPlan::generate`]
//! (intensity drawn from the seed, sometimes zero) with extra client
//! cancels. [`check`] runs it on the one [`Engine`] with in-thread hosts
//! and the [`Serving`] director wrapped in a checking director ([`Dst`]),
//! and checks after every engine unit ([`Engine::run_event`]):
//!
//! - **accounting**: on every worker, `free + cached + used == total` with
//!   `free` counted by the core's allocator ([`SchedulerCore::free_blocks`])
//!   and the categories by its owner counters; request slots within bounds;
//!   no pinned blocks without an open source lease, no reserved blocks
//!   without an open reservation, and as many live roles in the worker as
//!   the checker has seen start and not end;
//! - **roles**: every transition starts from the state the previous one of
//!   that role ended in, on the same worker; nothing follows `Released`;
//!   one `RoleEnded` per role, after its `Released`; every lease and
//!   reservation opens and ends exactly once ([`Ledger`]) and its ownership
//!   deltas net to zero; at the end every role that started has ended;
//! - **no `Stored` before activation**: a decode worker never publishes a
//!   block hash of a destination it holds reserved and not yet active,
//!   unless a request activated on that worker (this incarnation) has the
//!   same hash (a shared prefix published legitimately);
//! - **no transfer before a reservation**: a `StartTransfer` names an
//!   attempt whose destination reached `Reserved`, at most once per attempt;
//! - **router bookings**: each booking is made once and released once, by
//!   the event that ends its request's work in that pool (a source's end; a
//!   decode completion or a destination's early end) or, for a request that
//!   failed, by the loss of the worker it is booked on (or its never
//!   reaching that worker); a release trigger for a booking already
//!   released by a trigger is a double release; the routers' booking counts
//!   always equal the checker's and their totals audit; at the end no
//!   booking remains;
//! - **requests**: each is terminal exactly once, finished (its decode
//!   completed) or failed as the report counts it, never both; a request
//!   still in flight at the end must have had roles torn down by the
//!   engine (then it counts as failed once); the report's totals agree;
//! - **drained**: when nothing is left to happen, every worker that is up
//!   holds no role, no pinned and no reserved block (a role still alive
//!   then is stuck: only the engine's teardown would end it), and after the
//!   teardown it is drained. A worker killed and not restarted holds no
//!   role or lease; the requests its dead core still lists are not checked
//!   (a dead process's memory is gone; they failed at the kill).
//!
//! The role, ledger, transfer and KV checks follow each worker's events in
//! the order the worker produced them: a step's outputs are held until the
//! step ends while an input delivered meanwhile releases its own at once
//! (the engine's documented modelling gap), so the checker reads a step's
//! outputs when it begins ([`WorkerHost::held`]) and skips them when the
//! driver sees them. Booking and terminal checks follow the director, in
//! the order it sees events. `DST_TRACE=1` prints every event a run's
//! director sees.
//!
//! A failing schedule is shrunk ([`shrink`]): timed faults are removed one
//! by one, each fault probability is zeroed, then runs of requests are
//! removed from the trace (halves, quarters, ... single requests), keeping
//! every change under which the same kind of violation still shows.
//! [`Failure::render`] prints the seed, the deployment, the shrunk plan
//! (fault-plan text), the shrunk trace (Mooncake JSONL) and a regression
//! test body that calls [`assert_passes`].

mod checker;
mod director;
mod many;
mod paths;
mod running;
mod schedule;
mod shrink;
mod violations;

pub use checker::*;
pub use director::*;
pub use many::*;
pub use paths::*;
pub use running::*;
pub use schedule::*;
pub use shrink::*;
pub use violations::*;
