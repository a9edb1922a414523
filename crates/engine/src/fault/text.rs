//! The text form of a fault plan: its writer and its parser.

use super::error::{Expected, FaultPlanError, FaultPlanErrorKind, TimeText};
use super::plan::{nanos, Fault, FaultPlan, TimedFault};
use super::MAX_TIMED_FAULTS;
use crate::scale::{FleetMember, ScalePool, MAX_FLEET_WORKER};
use handoff_core::ids::{RequestId, WorkerId};
use handoff_core::time::{Duration, Instant};
use std::fmt;
use std::str::FromStr;

/// Writes the text format, one directive per line: `seed`, the timed faults
/// in order, then every channel and transfer probability (zeros included).
/// Times use the coarsest exact unit; probabilities use Rust's shortest
/// round-tripping decimal. A plan built by hand with values the parser
/// rejects (a NaN, a probability above 1, an empty partition, a delay past
/// `u64::MAX` ns) is written as is and will not parse back.
impl fmt::Display for FaultPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "seed {}", self.seed)?;
        if !self.fleet.is_empty() {
            for m in &self.fleet.members {
                let absent = if m.absent { " absent" } else { "" };
                writeln!(f, "fleet {} {}{absent}", m.worker.0, m.pool.name())?;
            }
            writeln!(
                f,
                "startup-delay {}",
                TimeText(nanos(self.fleet.startup_delay))
            )?;
        }
        for t in &self.timed {
            let at = TimeText(t.at.0);
            match t.fault {
                Fault::Kill { worker } => writeln!(f, "kill {} at {at}", worker.0)?,
                Fault::Restart { worker } => writeln!(f, "restart {} at {at}", worker.0)?,
                Fault::Partition { a, b, until } => writeln!(
                    f,
                    "partition {} {} from {at} to {}",
                    a.0,
                    b.0,
                    TimeText(until.0)
                )?,
                Fault::Cancel { request } => writeln!(f, "cancel {} at {at}", request.0)?,
                Fault::ScaleUp { pool } => writeln!(f, "scale-up {} at {at}", pool.name())?,
                Fault::Ready { worker } => writeln!(f, "ready {} at {at}", worker.0)?,
                Fault::Drain { worker } => writeln!(f, "drain {} at {at}", worker.0)?,
                Fault::Remove { worker } => writeln!(f, "remove {} at {at}", worker.0)?,
            }
        }
        writeln!(f, "drop {}", self.facts.drop)?;
        writeln!(f, "duplicate {}", self.facts.duplicate)?;
        writeln!(
            f,
            "delay {} max {}",
            self.facts.delay,
            TimeText(nanos(self.facts.max_delay))
        )?;
        writeln!(f, "transfer-fail {}", self.transfer_fail)
    }
}

impl FromStr for FaultPlan {
    type Err = FaultPlanError;

    fn from_str(text: &str) -> Result<FaultPlan, FaultPlanError> {
        let mut p = Parser {
            plan: FaultPlan::none(),
            seen: [None; 6],
            fleet_lines: Vec::new(),
        };
        let mut toks: Vec<Tok<'_>> = Vec::with_capacity(MAX_DIRECTIVE_TOKENS);
        for (i, line) in text.split('\n').enumerate() {
            let line_no = i + 1;
            let code = match line.find('#') {
                Some(hash) => &line[..hash],
                None => line,
            };
            let mut start: Option<(usize, usize)> = None;
            let mut col = 0;
            for (byte, c) in code.char_indices() {
                col += 1;
                if c == ';' || c.is_whitespace() {
                    if let Some((s, sc)) = start.take() {
                        push_tok(&mut toks, &code[s..byte], sc);
                    }
                    if c == ';' {
                        p.directive(line_no, &toks)?;
                        toks.clear();
                    }
                } else if start.is_none() {
                    start = Some((byte, col));
                }
            }
            if let Some((s, sc)) = start {
                push_tok(&mut toks, &code[s..], sc);
            }
            p.directive(line_no, &toks)?;
            toks.clear();
        }
        p.plan.timed.sort_by_key(|t| t.at);
        Ok(p.plan)
    }
}

/// The longest directive (`partition A B from T to U`) has 7 tokens; one
/// more is kept to report as trailing, the rest are not stored, so memory
/// stays bounded whatever the input.
const MAX_DIRECTIVE_TOKENS: usize = 8;

#[derive(Clone, Copy)]
struct Tok<'a> {
    col: usize,
    text: &'a str,
}

fn push_tok<'a>(toks: &mut Vec<Tok<'a>>, text: &'a str, col: usize) {
    if toks.len() < MAX_DIRECTIVE_TOKENS {
        toks.push(Tok { col, text });
    }
}

/// A token for an error message, at most 40 characters.
fn clip(text: &str) -> String {
    match text.char_indices().nth(40) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_owned(),
    }
}

/// The once-only directives, indexing `Parser::seen`.
const ONCE: [&str; 6] = [
    "seed",
    "drop",
    "duplicate",
    "delay",
    "transfer-fail",
    "startup-delay",
];

struct Parser {
    plan: FaultPlan,
    /// For each of [`ONCE`], the line that gave it.
    seen: [Option<usize>; 6],
    /// The line that named each fleet member, in `plan.fleet` order.
    fleet_lines: Vec<usize>,
}

struct Cursor<'t, 'a> {
    toks: &'t [Tok<'a>],
    pos: usize,
    line: usize,
}

impl<'a> Cursor<'_, 'a> {
    fn err(&self, column: usize, kind: FaultPlanErrorKind) -> FaultPlanError {
        FaultPlanError {
            line: self.line,
            column,
            kind,
        }
    }

    /// Column just past the directive's last stored token.
    fn end_col(&self) -> usize {
        self.toks
            .last()
            .map_or(1, |t| t.col + t.text.chars().count())
    }

    fn next(&mut self, expected: Expected) -> Result<Tok<'a>, FaultPlanError> {
        match self.toks.get(self.pos) {
            Some(&t) => {
                self.pos += 1;
                Ok(t)
            }
            None => Err(self.err(
                self.end_col(),
                FaultPlanErrorKind::Expected {
                    expected,
                    found: None,
                },
            )),
        }
    }

    fn expected(&self, t: Tok<'_>, expected: Expected) -> FaultPlanError {
        self.err(
            t.col,
            FaultPlanErrorKind::Expected {
                expected,
                found: Some(clip(t.text)),
            },
        )
    }

    fn keyword(&mut self, kw: &'static str) -> Result<(), FaultPlanError> {
        let t = self.next(Expected::Keyword(kw))?;
        if t.text == kw {
            Ok(())
        } else {
            Err(self.expected(t, Expected::Keyword(kw)))
        }
    }

    fn integer<T: FromStr>(&mut self, expected: Expected) -> Result<(T, usize), FaultPlanError> {
        let t = self.next(expected)?;
        // Plain digits only: `u64::from_str` would also take a leading `+`.
        if !t.text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(self.expected(t, expected));
        }
        match t.text.parse() {
            Ok(v) => Ok((v, t.col)),
            Err(_) => Err(self.expected(t, expected)),
        }
    }

    fn worker(&mut self) -> Result<(WorkerId, usize), FaultPlanError> {
        let (w, col) = self.integer(Expected::WorkerId)?;
        Ok((WorkerId(w), col))
    }

    fn time(&mut self) -> Result<(u64, usize), FaultPlanError> {
        let t = self.next(Expected::Time)?;
        parse_time(t.text)
            .map(|ns| (ns, t.col))
            .map_err(|kind| self.err(t.col, kind))
    }

    fn probability(&mut self) -> Result<f64, FaultPlanError> {
        let t = self.next(Expected::Probability)?;
        let p: f64 = t
            .text
            .parse()
            .map_err(|_| self.expected(t, Expected::Probability))?;
        if !(0.0..=1.0).contains(&p) {
            return Err(self.err(
                t.col,
                FaultPlanErrorKind::ProbabilityOutOfRange {
                    found: clip(t.text),
                },
            ));
        }
        // Turns -0 into 0.
        Ok(p + 0.0)
    }

    fn finish(&self) -> Result<(), FaultPlanError> {
        match self.toks.get(self.pos) {
            Some(t) => Err(self.err(
                t.col,
                FaultPlanErrorKind::Trailing {
                    found: clip(t.text),
                },
            )),
            None => Ok(()),
        }
    }

    /// `kill W at T` or `restart W at T`, after the directive's name.
    fn kill_or_restart(&mut self, kill: bool) -> Result<TimedFault, FaultPlanError> {
        let (worker, _) = self.worker()?;
        self.keyword("at")?;
        let (at, _) = self.time()?;
        let fault = if kill {
            Fault::Kill { worker }
        } else {
            Fault::Restart { worker }
        };
        Ok(TimedFault {
            at: Instant(at),
            fault,
        })
    }

    /// `partition A B from T to U`, after the directive's name.
    fn partition(&mut self) -> Result<TimedFault, FaultPlanError> {
        let (a, _) = self.worker()?;
        let (b, b_col) = self.worker()?;
        if a == b {
            return Err(self.err(b_col, FaultPlanErrorKind::SelfPartition { worker: a }));
        }
        self.keyword("from")?;
        let (from, _) = self.time()?;
        self.keyword("to")?;
        let (until, until_col) = self.time()?;
        if until <= from {
            return Err(self.err(
                until_col,
                FaultPlanErrorKind::EmptyPartition {
                    from: Instant(from),
                    until: Instant(until),
                },
            ));
        }
        Ok(TimedFault {
            at: Instant(from),
            fault: Fault::Partition {
                a,
                b,
                until: Instant(until),
            },
        })
    }

    /// `scale-up POOL at T`, after the directive's name.
    fn scale_up(&mut self) -> Result<TimedFault, FaultPlanError> {
        let t = self.next(Expected::Pool)?;
        let pool = ScalePool::from_name(t.text).ok_or_else(|| self.expected(t, Expected::Pool))?;
        self.keyword("at")?;
        let (at, _) = self.time()?;
        Ok(TimedFault {
            at: Instant(at),
            fault: Fault::ScaleUp { pool },
        })
    }

    /// `ready|drain|remove W at T`, after the directive's name.
    fn worker_at(&mut self, make: fn(WorkerId) -> Fault) -> Result<TimedFault, FaultPlanError> {
        let (worker, _) = self.worker()?;
        self.keyword("at")?;
        let (at, _) = self.time()?;
        Ok(TimedFault {
            at: Instant(at),
            fault: make(worker),
        })
    }

    /// `fleet W POOL [absent]`, after the directive's name.
    fn fleet_member(&mut self) -> Result<(FleetMember, usize), FaultPlanError> {
        let (worker, col) = self.worker()?;
        if worker.0 > MAX_FLEET_WORKER {
            return Err(self.err(col, FaultPlanErrorKind::FleetWorkerTooLarge { worker }));
        }
        let t = self.next(Expected::Pool)?;
        let pool = ScalePool::from_name(t.text).ok_or_else(|| self.expected(t, Expected::Pool))?;
        let absent = match self.toks.get(self.pos) {
            Some(t) if t.text == "absent" => {
                self.pos += 1;
                true
            }
            _ => false,
        };
        Ok((
            FleetMember {
                worker,
                pool,
                absent,
            },
            col,
        ))
    }

    /// `cancel R at T`, after the directive's name.
    fn cancel(&mut self) -> Result<TimedFault, FaultPlanError> {
        let (request, _) = self.integer(Expected::RequestId)?;
        self.keyword("at")?;
        let (at, _) = self.time()?;
        Ok(TimedFault {
            at: Instant(at),
            fault: Fault::Cancel {
                request: RequestId(request),
            },
        })
    }
}

/// Parses `digits[.digits](ns|us|ms|s)` exactly into nanoseconds.
pub(crate) fn parse_time(text: &str) -> Result<u64, FaultPlanErrorKind> {
    let expected = || FaultPlanErrorKind::Expected {
        expected: Expected::Time,
        found: Some(clip(text)),
    };
    let (number, unit) = if let Some(n) = text.strip_suffix("ns") {
        (n, 1u128)
    } else if let Some(n) = text.strip_suffix("us") {
        (n, 1_000)
    } else if let Some(n) = text.strip_suffix("ms") {
        (n, 1_000_000)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1_000_000_000)
    } else {
        return Err(expected());
    };
    let (negative, number) = match number.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, number),
    };
    let (int, frac) = match number.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (number, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(int) || frac.is_some_and(|f| !digits(f)) {
        return Err(expected());
    }
    if negative {
        return Err(FaultPlanErrorKind::NegativeTime { found: clip(text) });
    }
    let out_of_range = || FaultPlanErrorKind::TimeOutOfRange { found: clip(text) };
    let max = u128::from(u64::MAX);
    let mut whole: u128 = 0;
    for b in int.bytes() {
        whole = whole * 10 + u128::from(b - b'0');
        if whole > max {
            return Err(out_of_range());
        }
    }
    let mut total = whole * unit;
    if let Some(frac) = frac {
        let frac = frac.trim_end_matches('0');
        // A unit is at most 10^9 ns, so more than 9 significant fraction
        // digits (the last one non-zero) cannot be a whole nanosecond.
        if frac.len() > 9 {
            return Err(FaultPlanErrorKind::SubNanosecond { found: clip(text) });
        }
        let mut value: u128 = 0;
        for b in frac.bytes() {
            value = value * 10 + u128::from(b - b'0');
        }
        let scaled = value * unit;
        let denom = 10u128.pow(frac.len() as u32);
        if !scaled.is_multiple_of(denom) {
            return Err(FaultPlanErrorKind::SubNanosecond { found: clip(text) });
        }
        total += scaled / denom;
    }
    u64::try_from(total).map_err(|_| out_of_range())
}

impl Parser {
    fn directive(&mut self, line: usize, toks: &[Tok<'_>]) -> Result<(), FaultPlanError> {
        let Some(&head) = toks.first() else {
            return Ok(());
        };
        let mut c = Cursor { toks, pos: 1, line };
        let once = ONCE.iter().position(|d| *d == head.text);
        if let Some(i) = once {
            if let Some(first_line) = self.seen[i] {
                return Err(c.err(
                    head.col,
                    FaultPlanErrorKind::Repeated {
                        directive: ONCE[i],
                        first_line,
                    },
                ));
            }
            self.seen[i] = Some(line);
        }
        let timed = match head.text {
            "seed" => {
                self.plan.seed = c.integer(Expected::Seed)?.0;
                None
            }
            "drop" => {
                self.plan.facts.drop = c.probability()?;
                None
            }
            "duplicate" => {
                self.plan.facts.duplicate = c.probability()?;
                None
            }
            "delay" => {
                self.plan.facts.delay = c.probability()?;
                c.keyword("max")?;
                self.plan.facts.max_delay = Duration::from_nanos(c.time()?.0);
                None
            }
            "transfer-fail" => {
                self.plan.transfer_fail = c.probability()?;
                None
            }
            "startup-delay" => {
                self.plan.fleet.startup_delay = Duration::from_nanos(c.time()?.0);
                None
            }
            "fleet" => {
                let (m, col) = c.fleet_member()?;
                let at = self
                    .plan
                    .fleet
                    .members
                    .iter()
                    .position(|x| x.worker == m.worker);
                if let Some(i) = at {
                    return Err(c.err(
                        col,
                        FaultPlanErrorKind::FleetMemberTwice {
                            worker: m.worker,
                            first_line: self.fleet_lines[i],
                        },
                    ));
                }
                if self.plan.fleet.members.len() > MAX_FLEET_WORKER as usize {
                    return Err(c.err(
                        col,
                        FaultPlanErrorKind::FleetWorkerTooLarge { worker: m.worker },
                    ));
                }
                self.plan.fleet.members.push(m);
                self.fleet_lines.push(line);
                None
            }
            "scale-up" => Some(c.scale_up()?),
            "ready" => Some(c.worker_at(|worker| Fault::Ready { worker })?),
            "drain" => Some(c.worker_at(|worker| Fault::Drain { worker })?),
            "remove" => Some(c.worker_at(|worker| Fault::Remove { worker })?),
            "kill" | "restart" => Some(c.kill_or_restart(head.text == "kill")?),
            "partition" => Some(c.partition()?),
            "cancel" => Some(c.cancel()?),
            other => {
                return Err(c.err(
                    head.col,
                    FaultPlanErrorKind::UnknownDirective { found: clip(other) },
                ))
            }
        };
        c.finish()?;
        if let Some(t) = timed {
            if self.plan.timed.len() >= MAX_TIMED_FAULTS {
                return Err(c.err(
                    head.col,
                    FaultPlanErrorKind::TooManyTimedFaults {
                        max: MAX_TIMED_FAULTS,
                    },
                ));
            }
            self.plan.timed.push(t);
        }
        Ok(())
    }
}
