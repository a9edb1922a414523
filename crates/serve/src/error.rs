//! Why the server could not start, or stopped without a report.

use handoff_deployment::EngineError;

/// A lower library's error behind a socket or thread that could not be
/// set up (tokio's, libzmq's, the OS's).
pub type Source = Box<dyn std::error::Error + Send + Sync>;

/// Why the server could not start, or stopped without a report. Every
/// variant names the flag or part concerned; `Display` is the message the
/// command line prints.
#[derive(Debug)]
pub enum ServeError {
    /// A flag's value does not parse: the flag, its value, what was
    /// expected.
    Flag {
        /// The flag (`--worker-http`, `--kv-events`, ...).
        flag: String,
        /// Its value.
        value: String,
        /// What was expected.
        expected: &'static str,
    },
    /// A per-worker range of ports runs past 65535 at `worker`.
    PortRange {
        /// The flag.
        flag: String,
        /// Its value (the first worker's address or port).
        value: String,
        /// The first worker whose port does not exist.
        worker: usize,
    },
    /// A listener names a worker the deployment does not have.
    NoSuchWorker {
        /// The worker named.
        worker: u32,
        /// Workers in the deployment.
        workers: usize,
    },
    /// The deployment lists another number of engine specs than schedulers.
    Specs {
        /// Specs given.
        specs: usize,
        /// Schedulers of the deployment.
        schedulers: usize,
    },
    /// A worker's engine spec builds no core.
    Engine(EngineError),
    /// `--lora-modules` names an adapter twice.
    Lora(String),
    /// A socket could not be bound or set up: the flag, the address, why.
    Socket {
        /// The flag (`--http`, `--worker-http`, `--kv-events`, `--kv-replay`).
        flag: String,
        /// The address.
        addr: String,
        /// Why.
        source: Source,
    },
    /// The runtime or a thread could not start.
    Spawn {
        /// What (`the runtime`, `the engine thread`, ...).
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// The engine thread panicked.
    EnginePanicked,
    /// The engine stopped without writing its report.
    NoReport,
    /// A Hugging Face `tokenizer.json` could not be loaded.
    Tokenizer {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: Source,
    },
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServeError::Flag {
                flag,
                value,
                expected,
            } => write!(f, "{flag} {value}: expected {expected}"),
            ServeError::PortRange {
                flag,
                value,
                worker,
            } => write!(f, "{flag} {value}: worker {worker}'s port is past 65535"),
            ServeError::NoSuchWorker { worker, workers } => {
                write!(f, "--worker-http {worker}: there are {workers} workers")
            }
            ServeError::Specs { specs, schedulers } => write!(
                f,
                "one engine spec per worker is needed: {specs} specs for {schedulers} schedulers"
            ),
            ServeError::Engine(e) => e.fmt(f),
            ServeError::Lora(e) => write!(f, "--lora-modules: {e}"),
            ServeError::Socket { flag, addr, source } => write!(f, "{flag} {addr}: {source}"),
            ServeError::Spawn { what, source } => write!(f, "starting {what}: {source}"),
            ServeError::EnginePanicked => f.write_str("the engine thread panicked"),
            ServeError::NoReport => f.write_str("the engine wrote no report"),
            ServeError::Tokenizer { path, source } => {
                write!(f, "--tokenizer {}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for ServeError {}

impl ServeError {
    /// A socket error of `flag` at `addr`.
    pub(crate) fn socket(flag: &str, addr: impl ToString, source: impl Into<Source>) -> Self {
        ServeError::Socket {
            flag: flag.to_string(),
            addr: addr.to_string(),
            source: source.into(),
        }
    }
}
