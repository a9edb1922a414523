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
    /// A cell that is not one of the words its column holds.
    Word {
        /// 1-based line.
        line: usize,
        /// Column name.
        column: &'static str,
        /// The cell.
        value: String,
        /// The words it may be.
        expected: &'static str,
    },
    /// More rows than [`MAX_ROWS`].
    TooMany,
}

impl AicError {
    /// The 1-based line the error is on (0: the file as a whole).
    pub fn line(&self) -> usize {
        match self {
            AicError::Cell { line, .. }
            | AicError::Width { line, .. }
            | AicError::Word { line, .. } => *line,
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
            AicError::Word {
                line,
                column,
                value,
                expected,
            } => write!(
                f,
                "line {line}, column `{column}`: `{value}` is not {expected}"
            ),
            AicError::TooMany => write!(f, "more than {MAX_ROWS} rows"),
        }
    }
}

/// Rows read at most.
pub const MAX_ROWS: usize = 1000;

/// A backend AIConfigurator names in its `backend` columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum AicBackend {
    /// `vllm`.
    Vllm,
    /// `sglang`.
    Sglang,
    /// `trtllm` (not modelled here).
    TrtLlm,
}

impl AicBackend {
    /// The backend AIConfigurator's (and `--backend`'s) `name` is.
    pub fn parse(name: &str) -> Option<AicBackend> {
        match name {
            "vllm" => Some(AicBackend::Vllm),
            "sglang" => Some(AicBackend::Sglang),
            "trtllm" => Some(AicBackend::TrtLlm),
            _ => None,
        }
    }

    /// Its name, as AIConfigurator and `--backend` spell it.
    pub fn name(self) -> &'static str {
        match self {
            AicBackend::Vllm => "vllm",
            AicBackend::Sglang => "sglang",
            AicBackend::TrtLlm => "trtllm",
        }
    }
}

/// One pool's parallelism as AIConfigurator writes it (`tp`, `pp`, `dp`,
/// `moe_tp`, `moe_ep`, `cp`; a column the file lacks is 1). Its MoE layer
/// spans `tp × dp` GPUs as `moe_tp × moe_ep` (`sdk/common.py`'s
/// `parallel` column: `tp{tp}pp{pp}dp{dp}etp{moe_tp}ep{moe_ep}`); a dense
/// model has `moe_tp = moe_ep = 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parallel {
    /// Tensor parallelism (attention).
    pub tp: u32,
    /// Pipeline parallelism.
    pub pp: u32,
    /// Attention data parallelism.
    pub dp: u32,
    /// MoE tensor parallelism.
    pub moe_tp: u32,
    /// MoE expert parallelism.
    pub moe_ep: u32,
    /// Context parallelism.
    pub cp: u32,
}

impl Parallel {
    /// Whether a size is 0.
    pub fn has_zero(&self) -> bool {
        [self.tp, self.pp, self.dp, self.moe_tp, self.moe_ep, self.cp].contains(&0)
    }
}

impl std::fmt::Display for Parallel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "tp{}pp{}dp{}etp{}ep{}cp{}",
            self.tp, self.pp, self.dp, self.moe_tp, self.moe_ep, self.cp
        )
    }
}

/// One row of AIConfigurator's picks.
#[derive(Clone, Debug, PartialEq)]
pub struct AicRow {
    /// 1-based line in the file.
    pub line: usize,
    /// The `model` column (a Hugging Face id), if the file has one.
    pub model: Option<String>,
    /// The AIC systems (`system`, or `(p)system` and `(d)system`) of the
    /// prefill (or aggregated) and decode workers, if given.
    pub system: [Option<String>; 2],
    /// The backends (`backend`, or `(p)backend` and `(d)backend`) of the
    /// prefill (or aggregated) and decode workers, if given.
    pub backend: [Option<AicBackend>; 2],
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
    /// Parallelism of prefill (or aggregated) workers.
    pub p_par: Parallel,
    /// Parallelism of decode workers (aggregated: as prefill).
    pub d_par: Parallel,
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
    /// A parallelism of 0.
    ZeroParallelism {
        /// Prefill's.
        prefill: Parallel,
        /// Decode's.
        decode: Parallel,
    },
}

impl std::fmt::Display for Unsimulable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unsimulable::Lengths { isl, osl } => write!(
                f,
                "isl {isl} and osl {osl}: a request needs at least one prompt and one output token"
            ),
            Unsimulable::ZeroParallelism { prefill, decode } => {
                write!(f, "a parallelism of 0 (prefill {prefill}, decode {decode})")
            }
        }
    }
}

impl AicRow {
    /// Whether the row is aggregated (no decode workers).
    pub fn aggregated(&self) -> bool {
        self.decode == 0
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
        (self.p_par.has_zero() || self.d_par.has_zero()).then_some(Unsimulable::ZeroParallelism {
            prefill: self.p_par,
            decode: self.d_par,
        })
    }

    /// `1P+2D tp1`, `4P+1D tp1/4` (prefill and decode TP differ), or
    /// `1x agg tp2`; ` dpN` when the prefill DP is over 1; ` epN` (or
    /// ` epP/D`) with expert parallelism.
    pub fn layout(&self) -> String {
        let mut dp = if self.p_par.dp > 1 {
            format!(" dp{}", self.p_par.dp)
        } else {
            String::new()
        };
        let (pe, de) = (self.p_par.moe_ep, self.d_par.moe_ep);
        if self.aggregated() || pe == de {
            if pe > 1 {
                dp.push_str(&format!(" ep{pe}"));
            }
        } else {
            dp.push_str(&format!(" ep{pe}/{de}"));
        }
        let tp = if self.aggregated() || self.p_par.tp == self.d_par.tp {
            format!("tp{}", self.p_par.tp)
        } else {
            format!("tp{}/{}", self.p_par.tp, self.d_par.tp)
        };
        if self.aggregated() {
            format!("{}x agg {tp}{dp}", self.prefill)
        } else {
            format!("{}P+{}D {tp}{dp}", self.prefill, self.decode)
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

/// A column the reader found: its name and place.
type Col = Option<(&'static str, usize)>;

/// A pool's columns: `tp`, `pp`, `dp`, `moe_tp`, `moe_ep`, `cp`.
const PAR_NAMES: [[&str; 6]; 3] = [
    ["tp", "pp", "dp", "moe_tp", "moe_ep", "cp"],
    ["(p)tp", "(p)pp", "(p)dp", "(p)moe_tp", "(p)moe_ep", "(p)cp"],
    ["(d)tp", "(d)pp", "(d)dp", "(d)moe_tp", "(d)moe_ep", "(d)cp"],
];

/// Where the header puts the columns a row is read from.
struct Columns {
    width: usize,
    /// isl, osl, concurrency, ttft, tpot, tokens/s/gpu, tokens/s/user,
    /// num_total_gpus.
    base: [(&'static str, usize); 8],
    /// Parallelism of prefill (or aggregated) and decode workers.
    par: [[Col; 6]; 2],
    workers: Option<[(&'static str, usize); 2]>,
    prefix: Col,
    model: Col,
    /// System and backend of prefill (or aggregated) and decode workers.
    system: [Col; 2],
    backend: [Col; 2],
}

impl Columns {
    fn of(head: Vec<String>) -> Result<Columns, AicError> {
        let col = |name: &'static str| head.iter().position(|h| h == name).map(|at| (name, at));
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
        let pool = |names: [&'static str; 6]| -> Result<[Col; 6], AicError> {
            Ok([
                Some(need(names[0])?),
                col(names[1]),
                col(names[2]),
                col(names[3]),
                col(names[4]),
                col(names[5]),
            ])
        };
        let (par, workers, system, backend) = if disagg {
            (
                [pool(PAR_NAMES[1])?, pool(PAR_NAMES[2])?],
                Some([need("(p)workers")?, need("(d)workers")?]),
                [col("(p)system"), col("(d)system")],
                [col("(p)backend"), col("(d)backend")],
            )
        } else {
            let agg = pool(PAR_NAMES[0])?;
            let (s, b) = (col("system"), col("backend"));
            ([agg, agg], None, [s, s], [b, b])
        };
        Ok(Columns {
            width: head.len(),
            base,
            par,
            workers,
            prefix: col("prefix"),
            model: col("model"),
            system,
            backend,
        })
    }

    /// The row on 1-based line `line_no`, whose text is `line`.
    fn row(&self, line_no: usize, line: &str) -> Result<AicRow, AicError> {
        let base = self.base;
        let c = cells(line.trim_end_matches('\r'));
        if c.len() != self.width {
            return Err(AicError::Width {
                line: line_no,
                cells: c.len(),
                header: self.width,
            });
        }
        let num = |(column, at): (&'static str, usize), max: f64| -> Result<f64, AicError> {
            let v = c[at].trim();
            v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0 && *x <= max)
                .ok_or_else(|| AicError::Cell {
                    line: line_no,
                    column,
                    value: v.to_string(),
                })
        };
        let int = |at: Col, max: f64| -> Result<u32, AicError> {
            at.map_or(Ok(1), |at| num(at, max).map(|x| x.round() as u32))
        };
        let pool = |p: [Col; 6]| -> Result<Parallel, AicError> {
            Ok(Parallel {
                tp: int(p[0], 1024.0)?,
                pp: int(p[1], 1024.0)?,
                dp: int(p[2], 1024.0)?,
                moe_tp: int(p[3], 1024.0)?,
                moe_ep: int(p[4], 1024.0)?,
                cp: int(p[5], 1024.0)?,
            })
        };
        let text = |at: Col| -> Option<String> {
            at.map(|(_, at)| c[at].trim().to_string())
                .filter(|t| !t.is_empty())
        };
        let backend = |at: Col| -> Result<Option<AicBackend>, AicError> {
            match (at, text(at)) {
                (Some((column, _)), Some(v)) => match AicBackend::parse(&v) {
                    Some(b) => Ok(Some(b)),
                    None => Err(AicError::Word {
                        line: line_no,
                        column,
                        value: v,
                        expected: "vllm, sglang or trtllm",
                    }),
                },
                _ => Ok(None),
            }
        };
        let (prefill, decode) = match self.workers {
            Some([p, d]) => (int(Some(p), 4096.0)?, int(Some(d), 4096.0)?),
            None => (1, 0),
        };
        Ok(AicRow {
            line: line_no,
            model: text(self.model),
            system: [text(self.system[0]), text(self.system[1])],
            backend: [backend(self.backend[0])?, backend(self.backend[1])?],
            isl: int(Some(base[0]), 1e6)?,
            osl: int(Some(base[1]), 1e6)?,
            prefix: self.prefix.map_or(Ok(0), |p| int(Some(p), 1e6))?,
            concurrency: int(Some(base[2]), 1e6)?.max(1),
            prefill: prefill.max(1),
            decode,
            p_par: pool(self.par[0])?,
            d_par: pool(self.par[1])?,
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
