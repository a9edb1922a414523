//! The one reader of whole user-named files (a report, a sweep summary, a
//! grid, a fault plan, an AIConfigurator CSV, a `tokenizer.json`): every
//! edge that reads a file a user or a report names reads it here.
//!
//! Invariants, whatever the path names:
//! - only a regular file is read: a FIFO, a character or block device
//!   (`/dev/zero`), a socket or a directory is refused before it is opened,
//!   and the file is opened with `O_NONBLOCK` and checked again through
//!   its own handle, so a path swapped for a FIFO in between cannot block
//!   the open;
//! - at most [`FileKind::max_bytes`] bytes are read (one more to tell that
//!   the file is larger), so memory stays bounded even if the file grows
//!   while it is read;
//! - every refusal is a [`FileError`] naming the flag, the path and why.
//!
//! Trace files are not read here: [`crate::TraceReader`] streams them with
//! a bound on every line, from any `BufRead` (a pipe included).

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

const MIB: u64 = 1 << 20;

/// What a file is for; each kind has its own size limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// A run's report JSON (`replay --rerun`). Large runs' reports with
    /// per-request rows reach tens of MiB.
    Report,
    /// A sweep's or plan's `summary.json` (`sweep merge`, `plan --merge`).
    Summary,
    /// A sweep grid (`sweep --grid`, TOML or JSON): a few hundred bytes in
    /// practice.
    Grid,
    /// A fault plan (`--faults FILE`).
    FaultPlan,
    /// An AIConfigurator result CSV (`plan --check-aic`).
    AicCsv,
    /// A Hugging Face `tokenizer.json` (`serve --tokenizer`): those of
    /// large vocabularies are 10-20 MB.
    Tokenizer,
    /// A step-time profile (`--perf profile:FILE`, `calibrate`): the same
    /// bound as `handoff_profiles::profile_file`'s reader.
    Profile,
    /// A real engine run's per-request record (`validate --real`):
    /// benchmark outputs with generated texts reach tens of MiB.
    RealRun,
}

impl FileKind {
    /// The most bytes a file of this kind may have.
    pub const fn max_bytes(self) -> u64 {
        match self {
            FileKind::Report | FileKind::Summary | FileKind::RealRun => 256 * MIB,
            FileKind::Profile => MIB,
            FileKind::Grid | FileKind::FaultPlan => MIB,
            FileKind::AicCsv => 16 * MIB,
            FileKind::Tokenizer => 64 * MIB,
        }
    }

    /// What a file of this kind is called in messages, with its article.
    pub const fn name(self) -> &'static str {
        match self {
            FileKind::Report => "a report",
            FileKind::Summary => "a summary",
            FileKind::Grid => "a grid file",
            FileKind::FaultPlan => "a fault plan",
            FileKind::AicCsv => "an AIConfigurator CSV",
            FileKind::Tokenizer => "a tokenizer.json",
            FileKind::Profile => "a profile",
            FileKind::RealRun => "a real run's record",
        }
    }
}

/// What a path names when it is not a regular file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NotRegular {
    /// A directory.
    Directory,
    /// A FIFO (named pipe): reading it waits for a writer.
    Fifo,
    /// A character device (`/dev/zero`, a terminal): endless or blocking.
    CharDevice,
    /// A block device.
    BlockDevice,
    /// A Unix socket.
    Socket,
    /// Anything else that is not a regular file.
    Other,
}

impl NotRegular {
    fn of(t: std::fs::FileType) -> Option<NotRegular> {
        if t.is_file() {
            return None;
        }
        if t.is_dir() {
            return Some(NotRegular::Directory);
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileTypeExt;
            if t.is_fifo() {
                return Some(NotRegular::Fifo);
            }
            if t.is_char_device() {
                return Some(NotRegular::CharDevice);
            }
            if t.is_block_device() {
                return Some(NotRegular::BlockDevice);
            }
            if t.is_socket() {
                return Some(NotRegular::Socket);
            }
        }
        Some(NotRegular::Other)
    }

    fn name(self) -> &'static str {
        match self {
            NotRegular::Directory => "a directory",
            NotRegular::Fifo => "a FIFO",
            NotRegular::CharDevice => "a character device",
            NotRegular::BlockDevice => "a block device",
            NotRegular::Socket => "a socket",
            NotRegular::Other => "not a regular file",
        }
    }
}

/// Why a file was not read.
#[derive(Debug)]
pub enum FileProblem {
    /// The path names something other than a regular file.
    NotRegular(NotRegular),
    /// The file has more bytes than its kind allows.
    TooLarge {
        /// Its kind.
        kind: FileKind,
        /// The bytes it has (at least; a file that grew while read shows
        /// the limit plus one).
        bytes: u64,
    },
    /// Its bytes are not UTF-8 (a text read).
    NotUtf8 {
        /// The byte offset of the first invalid byte.
        offset: usize,
    },
    /// Opening, inspecting or reading it failed.
    Io(std::io::Error),
}

/// A user-named file that was not read: the flag that named it, the path
/// and why.
#[derive(Debug)]
pub struct FileError {
    /// The flag (or subcommand) that named the file, e.g. `--rerun`.
    pub flag: String,
    /// The path as given.
    pub path: PathBuf,
    /// Why it was not read.
    pub problem: FileProblem,
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prefix = if self.flag.is_empty() {
            String::new()
        } else {
            format!("{} ", self.flag)
        };
        write!(f, "{prefix}{}: {}", self.path.display(), self.problem)
    }
}

impl fmt::Display for FileProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileProblem::NotRegular(what) => {
                write!(f, "{}, not a regular file; give a file", what.name())
            }
            FileProblem::TooLarge { kind, bytes } => write!(
                f,
                "{bytes} bytes, more than the {} MiB limit of {}",
                kind.max_bytes() / MIB,
                kind.name()
            ),
            FileProblem::NotUtf8 { offset } => {
                write!(f, "not UTF-8 text (invalid byte at offset {offset})")
            }
            FileProblem::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for FileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.problem.source()
    }
}

impl std::error::Error for FileProblem {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FileProblem::Io(e) => Some(e),
            _ => None,
        }
    }
}

fn error(flag: &str, path: &Path, problem: FileProblem) -> FileError {
    FileError {
        flag: flag.to_string(),
        path: path.to_path_buf(),
        problem,
    }
}

/// Refuses `path` (named by `flag`) unless it names a regular file (after
/// symbolic links), without opening it: for readers that open the file
/// themselves and bound what they read.
pub fn check_regular(flag: &str, path: &Path) -> Result<(), FileError> {
    let meta = std::fs::metadata(path).map_err(|e| error(flag, path, FileProblem::Io(e)))?;
    match NotRegular::of(meta.file_type()) {
        Some(what) => Err(error(flag, path, FileProblem::NotRegular(what))),
        None => Ok(()),
    }
}

/// Refuses `path` (named by `flag`) unless it names a regular file of at
/// most `kind.max_bytes()` bytes now, without opening it; its length. For
/// a reader that opens the file itself and cannot be handed the bytes
/// ([`read_bytes`] is the bounded read; this leaves the window between the
/// check and that reader's open).
pub fn check_file(flag: &str, path: &Path, kind: FileKind) -> Result<u64, FileError> {
    let meta = std::fs::metadata(path).map_err(|e| error(flag, path, FileProblem::Io(e)))?;
    if let Some(what) = NotRegular::of(meta.file_type()) {
        return Err(error(flag, path, FileProblem::NotRegular(what)));
    }
    if meta.len() > kind.max_bytes() {
        let bytes = meta.len();
        return Err(error(flag, path, FileProblem::TooLarge { kind, bytes }));
    }
    Ok(meta.len())
}

/// Opens `path` for reading without waiting on a FIFO's writer.
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    options.open(path)
}

/// The bytes of the regular file `path` (named by `flag`), at most
/// `kind.max_bytes()` of them.
pub fn read_bytes(flag: &str, path: &Path, kind: FileKind) -> Result<Vec<u8>, FileError> {
    let fail = |problem| error(flag, path, problem);
    check_regular(flag, path)?;
    let file = open_nonblocking(path).map_err(|e| fail(FileProblem::Io(e)))?;
    let meta = file.metadata().map_err(|e| fail(FileProblem::Io(e)))?;
    if let Some(what) = NotRegular::of(meta.file_type()) {
        return Err(fail(FileProblem::NotRegular(what)));
    }
    let limit = kind.max_bytes();
    if meta.len() > limit {
        return Err(fail(FileProblem::TooLarge {
            kind,
            bytes: meta.len(),
        }));
    }
    // The length is only a hint: the file may grow while it is read.
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(FileProblem::Io(e)))?;
    if bytes.len() as u64 > limit {
        return Err(fail(FileProblem::TooLarge {
            kind,
            bytes: bytes.len() as u64,
        }));
    }
    Ok(bytes)
}

/// The text of the regular file `path` (named by `flag`), at most
/// `kind.max_bytes()` bytes of UTF-8.
pub fn read_to_string(flag: &str, path: &Path, kind: FileKind) -> Result<String, FileError> {
    let bytes = read_bytes(flag, path, kind)?;
    String::from_utf8(bytes).map_err(|e| {
        error(
            flag,
            path,
            FileProblem::NotUtf8 {
                offset: e.utf8_error().valid_up_to(),
            },
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn temp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("hm-file-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        d
    }

    #[test]
    fn a_regular_file_is_read_whole() {
        let d = temp("regular");
        let p = d.join("grid.toml");
        std::fs::write(&p, "seed = [1, 2]\n").unwrap();
        assert_eq!(
            read_to_string("--grid", &p, FileKind::Grid).unwrap(),
            "seed = [1, 2]\n"
        );
        // An empty file is a file.
        std::fs::write(&p, "").unwrap();
        assert_eq!(read_bytes("--grid", &p, FileKind::Grid).unwrap(), b"");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_file_over_its_kinds_limit_is_refused_naming_the_limit() {
        let d = temp("large");
        let p = d.join("grid.toml");
        let limit = FileKind::Grid.max_bytes();
        std::fs::write(&p, vec![b'#'; limit as usize + 1]).unwrap();
        let e = read_to_string("--grid", &p, FileKind::Grid).unwrap_err();
        assert!(matches!(
            e.problem,
            FileProblem::TooLarge { kind: FileKind::Grid, bytes } if bytes == limit + 1
        ));
        let shown = e.to_string();
        assert!(shown.starts_with("--grid "), "{shown}");
        assert!(shown.contains("1 MiB limit of a grid file"), "{shown}");
        // Exactly the limit is fine.
        std::fs::write(&p, vec![b'#'; limit as usize]).unwrap();
        assert_eq!(
            read_bytes("--grid", &p, FileKind::Grid).unwrap().len() as u64,
            limit
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn check_file_refuses_what_read_bytes_refuses_without_opening() {
        let d = temp("check");
        let p = d.join("tokenizer.json");
        std::fs::write(&p, "{}").unwrap();
        assert_eq!(
            check_file("--tokenizer", &p, FileKind::Tokenizer).unwrap(),
            2
        );
        let big = d.join("big.toml");
        std::fs::write(&big, vec![b' '; FileKind::Grid.max_bytes() as usize + 1]).unwrap();
        let e = check_file("--grid", &big, FileKind::Grid).unwrap_err();
        assert!(matches!(e.problem, FileProblem::TooLarge { .. }));
        let e = check_file("--tokenizer", &d, FileKind::Tokenizer).unwrap_err();
        assert!(matches!(
            e.problem,
            FileProblem::NotRegular(NotRegular::Directory)
        ));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_directory_is_refused() {
        let d = temp("dir");
        let e = read_to_string("sweep merge", &d, FileKind::Summary).unwrap_err();
        assert!(matches!(
            e.problem,
            FileProblem::NotRegular(NotRegular::Directory)
        ));
        assert!(e.to_string().contains("a directory, not a regular file"));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_missing_file_is_an_io_error_naming_flag_and_path() {
        let e = read_to_string(
            "--rerun",
            Path::new("/nonexistent/r.json"),
            FileKind::Report,
        )
        .unwrap_err();
        assert!(matches!(e.problem, FileProblem::Io(_)));
        assert!(e.to_string().starts_with("--rerun /nonexistent/r.json: "));
    }

    #[test]
    fn bytes_that_are_not_utf8_are_located() {
        let d = temp("utf8");
        let p = d.join("r.json");
        std::fs::write(&p, b"{\"a\": \xff}").unwrap();
        let e = read_to_string("--rerun", &p, FileKind::Report).unwrap_err();
        assert!(matches!(e.problem, FileProblem::NotUtf8 { offset: 6 }));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn dev_zero_is_refused_before_a_byte_is_read() {
        let started = Instant::now();
        let e = read_bytes("--grid", Path::new("/dev/zero"), FileKind::Grid).unwrap_err();
        assert!(matches!(
            e.problem,
            FileProblem::NotRegular(NotRegular::CharDevice)
        ));
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(
            e.to_string(),
            "--grid /dev/zero: a character device, not a regular file; give a file"
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_refused_without_waiting_for_a_writer() {
        let d = temp("fifo");
        let p = d.join("pipe");
        let made = std::process::Command::new("mkfifo").arg(&p).status();
        if !made.is_ok_and(|s| s.success()) {
            // No mkfifo on this machine: nothing to check.
            return;
        }
        // Run the read on a thread: a reader that blocked on the open
        // would hang the test instead of failing it.
        let (tx, rx) = std::sync::mpsc::channel();
        let q = p.clone();
        std::thread::spawn(move || {
            let _ = tx.send(read_bytes("--tokenizer", &q, FileKind::Tokenizer).map(|b| b.len()));
        });
        let got = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("the read of a FIFO returned");
        let e = got.unwrap_err();
        assert!(matches!(
            e.problem,
            FileProblem::NotRegular(NotRegular::Fifo)
        ));
        assert!(e.to_string().contains("a FIFO, not a regular file"));
        // Opening it (non-blocking) and checking the handle refuses it too.
        let f = open_nonblocking(&p).expect("a non-blocking open returns");
        let t = f.metadata().expect("metadata").file_type();
        assert_eq!(NotRegular::of(t), Some(NotRegular::Fifo));
        let _ = std::fs::remove_dir_all(&d);
    }
}
