//! The reader of AIConfigurator's `best_config_topn.csv` and `pareto.csv`
//! (the columns are the module's opening doc's), and why a row it reads
//! is skipped or cannot be simulated.

/// Why an AIConfigurator file was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AicError {
    /// No header line.
    Empty,
    /// A column every row needs is missing from the header.
    MissingColumn(&'static str),
    /// A cell that is not the number its column holds.
    Cell {
        /// 1-based line.
        line: usize,
        /// Column name.
        column: &'static str,
        /// The cell.
        value: String,
    },
    /// A line with another number of cells than the header.
    Width {
        /// 1-based line.
        line: usize,
        /// Cells on it.
        cells: usize,
        /// Cells of the header.
        header: usize,
    },
    /// More rows than [`MAX_ROWS`].
    TooMany,
}

impl AicError {
    /// The 1-based line the error is on (0: the file as a whole).
    pub fn line(&self) -> usize {
        match self {
            AicError::Cell { line, .. } | AicError::Width { line, .. } => *line,
            AicError::Empty | AicError::MissingColumn(_) | AicError::TooMany => 0,
        }
    }
}

impl std::fmt::Display for AicError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AicError::Empty => write!(f, "no header line"),
            AicError::MissingColumn(c) => write!(f, "no `{c}` column"),
            AicError::Cell {
                line,
                column,
                value,
            } => write!(
                f,
                "line {line}, column `{column}`: `{value}` is not a number in range"
            ),
            AicError::Width {
                line,
                cells,
                header,
            } => write!(f, "line {line}: {cells} cells, the header has {header}"),
            AicError::TooMany => write!(f, "more than {MAX_ROWS} rows"),
        }
    }
}

/// Rows read at most.
pub const MAX_ROWS: usize = 1000;

/// One row of AIConfigurator's picks.
#[derive(Clone, Debug, PartialEq)]
pub struct AicRow {
    /// 1-based line in the file.
    pub line: usize,
    /// Prompt and output lengths, cached prefix.
    pub isl: u32,
    /// Output tokens.
    pub osl: u32,
    /// Cached prompt tokens.
    pub prefix: u32,
    /// Requests in flight.
    pub concurrency: u32,
    /// Prefill (or aggregated) workers, decode workers (0: aggregated).
    pub prefill: u32,
    /// Decode workers.
    pub decode: u32,
    /// TP, PP and DP of prefill (or aggregated) workers.
    pub p_par: [u32; 3],
    /// TP, PP and DP of decode workers (aggregated: as prefill).
    pub d_par: [u32; 3],
    /// Estimated TTFT and TPOT, ms.
    pub ttft_ms: f64,
    /// Estimated TPOT, ms.
    pub tpot_ms: f64,
    /// Estimated tokens/s/GPU and tokens/s/user.
    pub tok_s_gpu: f64,
    /// Estimated tokens/s/user.
    pub tok_s_user: f64,
    /// GPUs of the row.
    pub gpus: u32,
}

/// Why a valid row is not simulated here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// Prefill and decode pools at different TP or DP.
    PoolsDiffer {
        /// Prefill TP, DP.
        prefill: (u32, u32),
        /// Decode TP, DP.
        decode: (u32, u32),
    },
    /// Pipeline parallelism.
    Pipeline,
    /// A cached prefix of this many tokens.
    Prefix(u32),
    /// No profile of the model at this TP.
    NoProfile(u32),
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skip::PoolsDiffer { prefill, decode } => write!(
                f,
                "prefill TP{}/DP{} and decode TP{}/DP{} differ (one --tp, one --dp-size here)",
                prefill.0, prefill.1, decode.0, decode.1
            ),
            Skip::Pipeline => f.write_str("pipeline parallelism is not modelled"),
            Skip::Prefix(n) => write!(f, "a cached prefix of {n} tokens"),
            Skip::NoProfile(tp) => write!(f, "no profile at TP{tp}"),
        }
    }
}

/// Why no engine could run a row at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unsimulable {
    /// A prompt or output of no tokens.
    Lengths {
        /// Prompt tokens.
        isl: u32,
        /// Output tokens.
        osl: u32,
    },
    /// A TP, PP or DP of 0.
    ZeroParallelism {
        /// Prefill TP, PP, DP.
        prefill: [u32; 3],
        /// Decode TP, PP, DP.
        decode: [u32; 3],
    },
}

impl std::fmt::Display for Unsimulable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unsimulable::Lengths { isl, osl } => write!(
                f,
                "isl {isl} and osl {osl}: a request needs at least one prompt and one output token"
            ),
            Unsimulable::ZeroParallelism { prefill, decode } => write!(
                f,
                "a parallelism of 0 (prefill TP/PP/DP {prefill:?}, decode {decode:?})"
            ),
        }
    }
}

impl AicRow {
    /// Why this row cannot run here, if it cannot (a profile aside:
    /// [`Skip::NoProfile`] is the checker's).
    pub fn unsupported(&self) -> Option<Skip> {
        if self.p_par[0] != self.d_par[0] || self.p_par[2] != self.d_par[2] {
            return Some(Skip::PoolsDiffer {
                prefill: (self.p_par[0], self.p_par[2]),
                decode: (self.d_par[0], self.d_par[2]),
            });
        }
        if self.p_par[1] > 1 || self.d_par[1] > 1 {
            return Some(Skip::Pipeline);
        }
        (self.prefix > 0).then_some(Skip::Prefix(self.prefix))
    }

    /// Why no engine could run this row at all, if so: a length or a
    /// parallelism of zero (the row is refused, not simulated).
    pub fn unsimulable(&self) -> Option<Unsimulable> {
        if self.isl == 0 || self.osl == 0 {
            return Some(Unsimulable::Lengths {
                isl: self.isl,
                osl: self.osl,
            });
        }
        let zero = |p: [u32; 3]| p.contains(&0);
        (zero(self.p_par) || zero(self.d_par)).then_some(Unsimulable::ZeroParallelism {
            prefill: self.p_par,
            decode: self.d_par,
        })
    }

    /// `1P+2D tp1`, or `1x agg tp2`.
    pub fn layout(&self) -> String {
        let dp = if self.p_par[2] > 1 {
            format!(" dp{}", self.p_par[2])
        } else {
            String::new()
        };
        if self.decode == 0 {
            format!("{}x agg tp{}{dp}", self.prefill, self.p_par[0])
        } else {
            format!("{}P+{}D tp{}{dp}", self.prefill, self.decode, self.p_par[0])
        }
    }
}

/// Splits one CSV line (pandas quoting: `"` around a cell with a comma,
/// `""` for a quote inside).
pub(crate) fn cells(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut cur)),
            (c, _) => cur.push(c),
        }
    }
    out.push(cur);
    out
}

/// An AIConfigurator file read: its rows, and the lines that are not rows
/// (a cell that is not a number in range, another number of cells than
/// the header), each with its line and why, in file order.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct AicFile {
    /// The rows read.
    pub rows: Vec<AicRow>,
    /// The lines that could not be read as rows.
    pub bad: Vec<AicError>,
}

/// Where the header puts the columns a row is read from.
struct Columns {
    head: Vec<String>,
    /// isl, osl, concurrency, ttft, tpot, tokens/s/gpu, tokens/s/user,
    /// num_total_gpus.
    base: [usize; 8],
    /// TP, PP, DP of prefill (or aggregated) and decode workers.
    pp: [Option<usize>; 3],
    dp: [Option<usize>; 3],
    workers: Option<(usize, usize)>,
    prefix: Option<usize>,
}

impl Columns {
    fn of(head: Vec<String>) -> Result<Columns, AicError> {
        let col = |name: &'static str| head.iter().position(|h| h == name);
        let need = |name: &'static str| col(name).ok_or(AicError::MissingColumn(name));
        let disagg = col("(p)workers").is_some();
        let base = [
            need("isl")?,
            need("osl")?,
            need("concurrency")?,
            need("ttft")?,
            need("tpot")?,
            need("tokens/s/gpu")?,
            need("tokens/s/user")?,
            need("num_total_gpus")?,
        ];
        let par = |prefix: &str| -> Result<[Option<usize>; 3], AicError> {
            let names: [&'static str; 3] = match prefix {
                "(p)" => ["(p)tp", "(p)pp", "(p)dp"],
                "(d)" => ["(d)tp", "(d)pp", "(d)dp"],
                _ => ["tp", "pp", "dp"],
            };
            Ok([Some(need(names[0])?), col(names[1]), col(names[2])])
        };
        let (pp, dp) = if disagg {
            (par("(p)")?, par("(d)")?)
        } else {
            (par("")?, par("")?)
        };
        let workers = if disagg {
            Some((need("(p)workers")?, need("(d)workers")?))
        } else {
            None
        };
        let prefix = col("prefix");
        Ok(Columns {
            head,
            base,
            pp,
            dp,
            workers,
            prefix,
        })
    }

    /// The row on 1-based line `line_no`, whose text is `line`.
    fn row(&self, line_no: usize, line: &str) -> Result<AicRow, AicError> {
        let (head, base) = (&self.head, self.base);
        let c = cells(line.trim_end_matches('\r'));
        if c.len() != head.len() {
            return Err(AicError::Width {
                line: line_no,
                cells: c.len(),
                header: head.len(),
            });
        }
        let num = |at: usize, max: f64| -> Result<f64, AicError> {
            let v = c[at].trim();
            v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0 && *x <= max)
                .ok_or_else(|| AicError::Cell {
                    line: line_no,
                    column: column_name(head, at),
                    value: v.to_string(),
                })
        };
        let int = |at: Option<usize>, max: f64| -> Result<u32, AicError> {
            at.map_or(Ok(1), |at| num(at, max).map(|x| x.round() as u32))
        };
        let tri = |p: [Option<usize>; 3]| -> Result<[u32; 3], AicError> {
            Ok([int(p[0], 1024.0)?, int(p[1], 1024.0)?, int(p[2], 1024.0)?])
        };
        let (prefill, decode) = match self.workers {
            Some((p, d)) => (int(Some(p), 4096.0)?, int(Some(d), 4096.0)?),
            None => (1, 0),
        };
        Ok(AicRow {
            line: line_no,
            isl: int(Some(base[0]), 1e6)?,
            osl: int(Some(base[1]), 1e6)?,
            prefix: self.prefix.map_or(Ok(0), |p| int(Some(p), 1e6))?,
            concurrency: int(Some(base[2]), 1e6)?.max(1),
            prefill: prefill.max(1),
            decode,
            p_par: tri(self.pp)?,
            d_par: tri(self.dp)?,
            ttft_ms: num(base[3], 1e9)?,
            tpot_ms: num(base[4], 1e9)?,
            tok_s_gpu: num(base[5], 1e12)?,
            tok_s_user: num(base[6], 1e12)?,
            gpus: int(Some(base[7]), 1e6)?,
        })
    }
}

/// Reads AIConfigurator's `best_config_topn.csv` or `pareto.csv` text: a
/// header it cannot use, or more than [`MAX_ROWS`] lines of rows, refuses
/// the file; a line it cannot read as a row is kept in [`AicFile::bad`].
pub fn parse(text: &str) -> Result<AicFile, AicError> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, head) = lines.next().ok_or(AicError::Empty)?;
    let columns = Columns::of(cells(head.trim_end_matches('\r')))?;
    let mut file = AicFile::default();
    for (i, line) in lines {
        if file.rows.len() + file.bad.len() == MAX_ROWS {
            return Err(AicError::TooMany);
        }
        match columns.row(i + 1, line) {
            Ok(row) => file.rows.push(row),
            Err(e) => file.bad.push(e),
        }
    }
    Ok(file)
}

/// The header's name for column `at` (the known names the reader asks
/// for; anything else is `?`).
fn column_name(head: &[String], at: usize) -> &'static str {
    const KNOWN: [&str; 22] = [
        "isl",
        "osl",
        "prefix",
        "concurrency",
        "ttft",
        "tpot",
        "tokens/s/gpu",
        "tokens/s/user",
        "num_total_gpus",
        "tp",
        "pp",
        "dp",
        "(p)workers",
        "(d)workers",
        "(p)tp",
        "(p)pp",
        "(p)dp",
        "(d)tp",
        "(d)pp",
        "(d)dp",
        "bs",
        "global_bs",
    ];
    let name = head.get(at).map_or("", String::as_str);
    KNOWN.iter().find(|k| **k == name).copied().unwrap_or("?")
}
