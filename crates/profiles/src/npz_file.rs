//! Dynamo's step-time profile files (`--perf npz:FILE`): a NumPy `.npz`
//! archive read into a checked [`handoff_perf::DynamoGrid`].
//!
//! The archive is what Dynamo's profiler writes and its mocker reads
//! (`--planner-profile-data`; dynamo-mocker 1.6.1 `PerfModel::from_npz`):
//! `np.savez` of `prefill_isl`, `prefill_ttft_ms`, `decode_active_kv_tokens`,
//! `decode_context_length` (1-D) and `decode_itl` (2-D, rows by active KV
//! tokens, columns by context length), times in ms. Other arrays in it are
//! ignored, as Dynamo ignores them. Dynamo reads float64 only; this reader
//! also takes float32, int64 and int32 (either byte order, C or Fortran
//! order) and converts them to float64.
//!
//! The archive is opened with the `zip` crate; each entry is a `.npy` file
//! (NumPy's format, `numpy/lib/format.py`: magic, version, a Python dict
//! literal header with `descr`, `fortran_order` and `shape`, then the raw
//! values), parsed here strictly and bounded before any allocation: the file
//! by [`MAX_NPZ_BYTES`], a header by NumPy's own 10000-byte
//! `max_header_size`, an array by `handoff_perf::grid`'s point and cell
//! bounds. Entries compressed by `np.savez_compressed` are refused with an
//! error that says so. Every error names the file and the array.

use handoff_perf::grid::{MAX_GRID_AXIS_POINTS, MAX_GRID_CELLS};
use handoff_perf::{DynamoGrid, GridArray, GridArrays, GridError};
use std::io::{Cursor, Read};
use std::path::Path;

/// Largest archive read (checked before reading).
pub const MAX_NPZ_BYTES: u64 = 16 << 20;

/// Largest `.npy` header (NumPy's `max_header_size` default).
const MAX_HEADER_BYTES: usize = 10_000;

/// What is wrong with one array's `.npy` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NpyProblem {
    /// The archive has no `NAME.npy`.
    Missing,
    /// The entry is compressed (`np.savez_compressed`); write it with
    /// `np.savez`.
    Compressed,
    /// Not a `.npy` file: bad magic, version, header or truncated data.
    Malformed(String),
    /// A dtype other than float64, float32, int64 or int32.
    Dtype(String),
    /// A number of dimensions other than the array's (1, or 2 for
    /// `decode_itl`).
    Shape(Vec<u64>),
    /// More values than the bounds allow.
    TooLarge {
        /// Values declared by the header.
        len: u64,
    },
}

/// Why a profile archive was refused.
#[derive(Debug)]
pub enum NpzFileErrorKind {
    /// The file could not be read.
    Io(std::io::Error),
    /// The file is larger than [`MAX_NPZ_BYTES`].
    TooLarge {
        /// Its size in bytes.
        bytes: u64,
    },
    /// Not a zip archive (the `zip` crate's description).
    Archive(String),
    /// An array's entry is missing or unreadable.
    Array(GridArray, NpyProblem),
    /// The arrays were read, but their values are invalid.
    Invalid(GridError),
}

/// A refused profile archive, with its path.
#[derive(Debug)]
pub struct NpzFileError {
    /// The file, as given.
    pub path: String,
    /// What is wrong.
    pub kind: NpzFileErrorKind,
}

impl std::fmt::Display for NpzFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: ", self.path)?;
        match &self.kind {
            NpzFileErrorKind::Io(e) => write!(f, "{e}"),
            NpzFileErrorKind::TooLarge { bytes } => write!(
                f,
                "{bytes} bytes, more than the {MAX_NPZ_BYTES} a profile archive may have"
            ),
            NpzFileErrorKind::Archive(m) => write!(f, "not a .npz (zip) archive: {m}"),
            NpzFileErrorKind::Array(a, p) => {
                write!(f, "{}: ", a.name())?;
                match p {
                    NpyProblem::Missing => {
                        write!(f, "missing (no {}.npy in the archive)", a.name())
                    }
                    NpyProblem::Compressed => {
                        write!(
                            f,
                            "compressed entry (np.savez_compressed); write it with np.savez"
                        )
                    }
                    NpyProblem::Malformed(m) => write!(f, "not a .npy array: {m}"),
                    NpyProblem::Dtype(d) => {
                        write!(f, "dtype {d}; expected float64 (or float32, int64, int32)")
                    }
                    NpyProblem::Shape(s) => {
                        write!(f, "shape {s:?}; expected {} dimension(s)", a.ndim())
                    }
                    NpyProblem::TooLarge { len } => write!(f, "{len} values, more than allowed"),
                }
            }
            NpzFileErrorKind::Invalid(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for NpzFileError {}

/// Reads and checks the Dynamo profile at `path`; it is named by its file
/// name (what the report shows after `npz:`).
pub fn load(path: &Path) -> Result<DynamoGrid, NpzFileError> {
    let shown = path.display().to_string();
    let err = |kind| NpzFileError {
        path: shown.clone(),
        kind,
    };
    let file = std::fs::File::open(path).map_err(|e| err(NpzFileErrorKind::Io(e)))?;
    let bytes = file
        .metadata()
        .map_err(|e| err(NpzFileErrorKind::Io(e)))?
        .len();
    if bytes > MAX_NPZ_BYTES {
        return Err(err(NpzFileErrorKind::TooLarge { bytes }));
    }
    let mut data = Vec::new();
    file.take(MAX_NPZ_BYTES + 1)
        .read_to_end(&mut data)
        .map_err(|e| err(NpzFileErrorKind::Io(e)))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| shown.clone());
    parse(&data, &name, &shown)
}

/// Parses and checks an archive's bytes: the profile is named `name`,
/// errors name `origin`.
pub fn parse(data: &[u8], name: &str, origin: &str) -> Result<DynamoGrid, NpzFileError> {
    let err = |kind| NpzFileError {
        path: origin.to_string(),
        kind,
    };
    if data.len() as u64 > MAX_NPZ_BYTES {
        return Err(err(NpzFileErrorKind::TooLarge {
            bytes: data.len() as u64,
        }));
    }
    let mut zip = zip::ZipArchive::new(Cursor::new(data))
        .map_err(|e| err(NpzFileErrorKind::Archive(e.to_string())))?;
    let mut read =
        |a: GridArray| read_array(&mut zip, a).map_err(|p| err(NpzFileErrorKind::Array(a, p)));
    let prefill_isl = read(GridArray::PrefillIsl)?.0;
    let prefill_ttft_ms = read(GridArray::PrefillTtftMs)?.0;
    let decode_active_kv_tokens = read(GridArray::DecodeActiveKvTokens)?.0;
    let decode_context_length = read(GridArray::DecodeContextLength)?.0;
    let (decode_itl, decode_itl_shape) = read(GridArray::DecodeItl)?;
    let arrays = GridArrays {
        prefill_isl,
        prefill_ttft_ms,
        decode_active_kv_tokens,
        decode_context_length,
        decode_itl,
        decode_itl_shape,
    };
    DynamoGrid::new(name.to_string(), arrays).map_err(|e| err(NpzFileErrorKind::Invalid(e)))
}

/// Most values `array` may declare.
fn max_values(array: GridArray) -> u64 {
    if array.ndim() == 2 {
        MAX_GRID_CELLS as u64
    } else {
        MAX_GRID_AXIS_POINTS as u64
    }
}

/// One array's values (row-major) and its (rows, columns), or (len, 1).
fn read_array(
    zip: &mut zip::ZipArchive<Cursor<&[u8]>>,
    array: GridArray,
) -> Result<(Vec<f64>, (usize, usize)), NpyProblem> {
    let mut entry = match zip.by_name(&format!("{}.npy", array.name())) {
        Ok(e) => e,
        Err(zip::result::ZipError::FileNotFound) => return Err(NpyProblem::Missing),
        Err(zip::result::ZipError::UnsupportedArchive(_)) => return Err(NpyProblem::Compressed),
        Err(e) => return Err(NpyProblem::Malformed(e.to_string())),
    };
    if entry.compression() != zip::CompressionMethod::Stored {
        return Err(NpyProblem::Compressed);
    }
    let limit = (MAX_HEADER_BYTES + 16) as u64 + max_values(array) * 8;
    let mut bytes = Vec::new();
    (&mut entry)
        .take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| NpyProblem::Malformed(e.to_string()))?;
    if bytes.len() as u64 > limit {
        return Err(NpyProblem::TooLarge {
            len: bytes.len() as u64 / 8,
        });
    }
    parse_npy(&bytes, array)
}

/// A `.npy` file's element type.
#[derive(Clone, Copy)]
enum Elem {
    F64,
    F32,
    I64,
    I32,
}

/// The header's `descr`, `fortran_order` and `shape`.
struct Header {
    elem: Elem,
    big_endian: bool,
    fortran: bool,
    shape: Vec<u64>,
}

/// One `.npy` file (NumPy's format: `\x93NUMPY`, major and minor version,
/// a little-endian u16 (v1) or u32 (v2, v3) header length, the header,
/// then the values).
fn parse_npy(b: &[u8], array: GridArray) -> Result<(Vec<f64>, (usize, usize)), NpyProblem> {
    let bad = |m: &str| NpyProblem::Malformed(m.to_string());
    if b.len() < 10 || &b[..6] != b"\x93NUMPY" {
        return Err(bad("no \\x93NUMPY magic"));
    }
    let (len, start) = match b[6] {
        1 => (usize::from(u16::from_le_bytes([b[8], b[9]])), 10),
        2 | 3 if b.len() >= 12 => (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12),
        2 | 3 => return Err(bad("truncated preamble")),
        v => return Err(NpyProblem::Malformed(format!("format version {v}"))),
    };
    if len > MAX_HEADER_BYTES || start + len > b.len() {
        return Err(bad("header length past the entry or above 10000 bytes"));
    }
    let text = std::str::from_utf8(&b[start..start + len]).map_err(|_| bad("header not UTF-8"))?;
    let h = parse_header(text)?;
    if h.shape.len() != array.ndim() {
        return Err(NpyProblem::Shape(h.shape));
    }
    let n = h.shape.iter().fold(1u64, |acc, &d| acc.saturating_mul(d));
    if n > max_values(array) {
        return Err(NpyProblem::TooLarge { len: n });
    }
    let width = match h.elem {
        Elem::F64 | Elem::I64 => 8,
        Elem::F32 | Elem::I32 => 4,
    };
    let body = &b[start + len..];
    if (body.len() as u64) < n * width as u64 {
        return Err(NpyProblem::Malformed(format!(
            "{} bytes of values, {} needed",
            body.len(),
            n * width as u64
        )));
    }
    let values: Vec<f64> = body
        .chunks_exact(width)
        .take(n as usize)
        .map(|c| decode(c, h.elem, h.big_endian))
        .collect();
    let (rows, cols) = match h.shape[..] {
        [r, c] => (r as usize, c as usize),
        _ => (n as usize, 1),
    };
    if h.fortran && rows > 1 && cols > 1 {
        // Column-major on disk: value (r, c) is at c * rows + r.
        let t = (0..rows * cols)
            .map(|k| values[(k % cols) * rows + k / cols])
            .collect();
        return Ok((t, (rows, cols)));
    }
    Ok((values, (rows, cols)))
}

fn decode(c: &[u8], elem: Elem, big: bool) -> f64 {
    let mut w = [0u8; 8];
    w[..c.len()].copy_from_slice(c);
    if big {
        w[..c.len()].reverse();
    }
    let w4 = [w[0], w[1], w[2], w[3]];
    match elem {
        Elem::F64 => f64::from_le_bytes(w),
        Elem::F32 => f64::from(f32::from_le_bytes(w4)),
        Elem::I64 => i64::from_le_bytes(w) as f64,
        Elem::I32 => f64::from(i32::from_le_bytes(w4)),
    }
}

/// NumPy's header: a Python dict literal of exactly `descr` (a string),
/// `fortran_order` (`True`/`False`) and `shape` (a tuple of integers), as
/// `numpy.lib.format` writes it (padding spaces and a newline after).
fn parse_header(text: &str) -> Result<Header, NpyProblem> {
    let bad = |m: String| NpyProblem::Malformed(format!("header: {m}"));
    let mut p = Lexer {
        s: text.as_bytes(),
        i: 0,
    };
    p.expect(b'{').map_err(bad)?;
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    loop {
        if p.eat(b'}') {
            break;
        }
        let key = p.string().map_err(bad)?;
        p.expect(b':').map_err(bad)?;
        match key.as_str() {
            "descr" => descr = Some(p.string().map_err(bad)?),
            "fortran_order" => fortran = Some(p.boolean().map_err(bad)?),
            "shape" => shape = Some(p.tuple().map_err(bad)?),
            other => return Err(bad(format!("unknown key '{other}'"))),
        }
        if !p.eat(b',') {
            p.expect(b'}').map_err(bad)?;
            break;
        }
    }
    let (Some(descr), Some(fortran), Some(shape)) = (descr, fortran, shape) else {
        return Err(bad("needs descr, fortran_order and shape".into()));
    };
    let (big_endian, code) = match descr.as_bytes().first() {
        Some(b'<') => (false, &descr[1..]),
        Some(b'>') => (true, &descr[1..]),
        _ => return Err(NpyProblem::Dtype(descr)),
    };
    let elem = match code {
        "f8" => Elem::F64,
        "f4" => Elem::F32,
        "i8" => Elem::I64,
        "i4" => Elem::I32,
        _ => return Err(NpyProblem::Dtype(descr)),
    };
    Ok(Header {
        elem,
        big_endian,
        fortran,
        shape,
    })
}

/// A cursor over the header's bytes, skipping spaces between tokens.
struct Lexer<'a> {
    s: &'a [u8],
    i: usize,
}

impl Lexer<'_> {
    fn skip(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        self.skip();
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!("expected '{}' at byte {}", c as char, self.i))
        }
    }

    fn string(&mut self) -> Result<String, String> {
        self.skip();
        let q = match self.s.get(self.i) {
            Some(&q @ (b'\'' | b'"')) => q,
            _ => return Err(format!("expected a string at byte {}", self.i)),
        };
        let start = self.i + 1;
        let len = self.s[start..]
            .iter()
            .position(|&c| c == q)
            .ok_or_else(|| "unterminated string".to_string())?;
        self.i = start + len + 1;
        Ok(String::from_utf8_lossy(&self.s[start..start + len]).into_owned())
    }

    fn boolean(&mut self) -> Result<bool, String> {
        self.skip();
        for (word, v) in [(&b"True"[..], true), (&b"False"[..], false)] {
            if self.s[self.i..].starts_with(word) {
                self.i += word.len();
                return Ok(v);
            }
        }
        Err(format!("expected True or False at byte {}", self.i))
    }

    fn tuple(&mut self) -> Result<Vec<u64>, String> {
        self.expect(b'(')?;
        let mut dims = Vec::new();
        loop {
            if self.eat(b')') {
                return Ok(dims);
            }
            if dims.len() == 32 {
                return Err("more than 32 dimensions".into());
            }
            self.skip();
            let start = self.i;
            while self.i < self.s.len() && self.s[self.i].is_ascii_digit() {
                self.i += 1;
            }
            let digits = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
            dims.push(
                digits
                    .parse()
                    .map_err(|_| format!("expected a dimension at byte {start}"))?,
            );
            if !self.eat(b',') {
                self.expect(b')')?;
                return Ok(dims);
            }
        }
    }
}

/// `arrays` as `np.savez` writes them: one stored (uncompressed) entry per
/// array, little-endian float64 in C order. For tests and for tools that
/// hand a profile to Dynamo's mocker.
pub fn to_npz_bytes(arrays: &GridArrays) -> std::io::Result<Vec<u8>> {
    use std::io::Write;
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    let (rows, cols) = arrays.decode_itl_shape;
    let entries: [(GridArray, &[f64], String); 5] = [
        (
            GridArray::PrefillIsl,
            &arrays.prefill_isl,
            format!("({},)", arrays.prefill_isl.len()),
        ),
        (
            GridArray::PrefillTtftMs,
            &arrays.prefill_ttft_ms,
            format!("({},)", arrays.prefill_ttft_ms.len()),
        ),
        (
            GridArray::DecodeActiveKvTokens,
            &arrays.decode_active_kv_tokens,
            format!("({},)", arrays.decode_active_kv_tokens.len()),
        ),
        (
            GridArray::DecodeContextLength,
            &arrays.decode_context_length,
            format!("({},)", arrays.decode_context_length.len()),
        ),
        (
            GridArray::DecodeItl,
            &arrays.decode_itl,
            format!("({rows}, {cols})"),
        ),
    ];
    for (a, values, shape) in entries {
        w.start_file(format!("{}.npy", a.name()), opts)
            .map_err(std::io::Error::other)?;
        w.write_all(&npy_bytes(values, &shape))?;
    }
    Ok(w.finish().map_err(std::io::Error::other)?.into_inner())
}

/// One `.npy` v1.0 file of little-endian float64 values with `shape` (a
/// Python tuple), header padded to a 64-byte boundary as NumPy pads it.
pub fn npy_bytes(values: &[f64], shape: &str) -> Vec<u8> {
    let mut header = format!("{{'descr': '<f8', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use handoff_perf::GridErrorKind;

    /// Dynamo's format with known values: prefill 10 ms at 100 tokens,
    /// 20 at 200, 60 at 400; decode rows 0 and 1000 active KV tokens,
    /// columns 10 and 110 context, ITL [[5, 7], [9, 15]].
    fn arrays() -> GridArrays {
        GridArrays {
            prefill_isl: vec![100.0, 200.0, 400.0],
            prefill_ttft_ms: vec![10.0, 20.0, 60.0],
            decode_active_kv_tokens: vec![0.0, 1000.0],
            decode_context_length: vec![10.0, 110.0],
            decode_itl: vec![5.0, 7.0, 9.0, 15.0],
            decode_itl_shape: (2, 2),
        }
    }

    fn zip_of(entries: &[(&str, Vec<u8>)]) -> Vec<u8> {
        use std::io::Write;
        let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        for (name, bytes) in entries {
            w.start_file(*name, opts).unwrap();
            w.write_all(bytes).unwrap();
        }
        w.finish().unwrap().into_inner()
    }

    /// The five arrays as `np.savez` entries, one replaced.
    fn with(name: &str, bytes: Vec<u8>) -> Vec<u8> {
        let a = arrays();
        let mut entries = vec![
            ("prefill_isl.npy", npy_bytes(&a.prefill_isl, "(3,)")),
            ("prefill_ttft_ms.npy", npy_bytes(&a.prefill_ttft_ms, "(3,)")),
            (
                "decode_active_kv_tokens.npy",
                npy_bytes(&a.decode_active_kv_tokens, "(2,)"),
            ),
            (
                "decode_context_length.npy",
                npy_bytes(&a.decode_context_length, "(2,)"),
            ),
            ("decode_itl.npy", npy_bytes(&a.decode_itl, "(2, 2)")),
        ];
        entries.retain(|(n, _)| *n != name);
        if !bytes.is_empty() {
            entries.push((name, bytes));
        }
        zip_of(&entries)
    }

    fn refuse(data: &[u8]) -> NpzFileError {
        parse(data, "p.npz", "p.npz").unwrap_err()
    }

    #[test]
    fn reads_what_it_writes_and_interpolates_as_dynamo() {
        let bytes = to_npz_bytes(&arrays()).unwrap();
        let g = parse(&bytes, "perf_data.npz", "x").unwrap();
        assert_eq!(g.name(), "perf_data.npz");
        assert_eq!(g.arrays(), &arrays());
        // Grid points, between them, and past the last (last slope 0.2).
        assert_eq!(g.prefill_ms(200), 20.0);
        assert_eq!(g.prefill_ms(300), 40.0);
        assert_eq!(g.prefill_ms(500), 80.0);
        // Decode at a corner (batch 100 over 1000 tokens: mean 10) and
        // inside: 4 × 100 tokens: x = 400, y = 100, by hand
        // z1 = 5 + 0.004·400 = 6.6, z2 = 7 + 0.008·400 = 10.2,
        // z = 6.6 + (10.2 − 6.6)·90/100 = 9.84.
        assert_eq!(g.decode_ms(100, 1000), 9.0);
        assert!((g.decode_ms(4, 400) - 9.84).abs() < 1e-9);
    }

    #[test]
    fn other_dtypes_orders_and_extra_arrays_are_read() {
        // int64 prefill_isl, big-endian float32 ttft, a Fortran-order ITL
        // (column-major on disk) and an array Dynamo does not read.
        let mut isl = b"\x93NUMPY\x01\x00".to_vec();
        let h = "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }\n";
        isl.extend_from_slice(&(h.len() as u16).to_le_bytes());
        isl.extend_from_slice(h.as_bytes());
        for v in [100i64, 200, 400] {
            isl.extend_from_slice(&v.to_le_bytes());
        }
        let mut ttft = b"\x93NUMPY\x01\x00".to_vec();
        let h = "{'descr': '>f4', 'fortran_order': False, 'shape': (3,)}\n";
        ttft.extend_from_slice(&(h.len() as u16).to_le_bytes());
        ttft.extend_from_slice(h.as_bytes());
        for v in [10f32, 20.0, 60.0] {
            ttft.extend_from_slice(&v.to_be_bytes());
        }
        let mut f = npy_bytes(&[5.0, 9.0, 7.0, 15.0], "(2, 2)");
        let pos = f.windows(5).position(|w| w == b"False").unwrap();
        f.splice(pos..pos + 5, b"True ".iter().copied());
        let a = arrays();
        let data = zip_of(&[
            ("prefill_isl.npy", isl),
            ("prefill_ttft_ms.npy", ttft),
            (
                "decode_active_kv_tokens.npy",
                npy_bytes(&a.decode_active_kv_tokens, "(2,)"),
            ),
            (
                "decode_context_length.npy",
                npy_bytes(&a.decode_context_length, "(2,)"),
            ),
            ("decode_itl.npy", f),
            ("afd_metadata_json.npy", b"not read".to_vec()),
        ]);
        let g = parse(&data, "p.npz", "p.npz").unwrap();
        assert_eq!(g.arrays(), &a);
    }

    #[test]
    fn malformed_archives_are_refused_naming_the_array() {
        let e = refuse(b"PK\x03\x04 not really");
        assert!(matches!(e.kind, NpzFileErrorKind::Archive(_)), "{e}");
        let e = refuse(&with("decode_itl.npy", Vec::new()));
        assert_eq!(
            e.to_string(),
            "p.npz: decode_itl: missing (no decode_itl.npy in the archive)"
        );
        let e = refuse(&with("decode_itl.npy", npy_bytes(&[1.0; 4], "(4,)")));
        assert!(matches!(
            e.kind,
            NpzFileErrorKind::Array(GridArray::DecodeItl, NpyProblem::Shape(_))
        ));
        let mut c = npy_bytes(&[1.0, 2.0, 3.0], "(3,)");
        let pos = c.windows(3).position(|w| w == b"<f8").unwrap();
        c[pos + 1] = b'c';
        let e = refuse(&with("prefill_isl.npy", c));
        assert_eq!(
            e.to_string(),
            "p.npz: prefill_isl: dtype <c8; expected float64 (or float32, int64, int32)"
        );
        // Truncated values, a header past the entry, a huge declared shape.
        let mut t = npy_bytes(&[1.0, 2.0, 3.0], "(3,)");
        t.truncate(t.len() - 1);
        let e = refuse(&with("prefill_isl.npy", t));
        assert!(matches!(
            e.kind,
            NpzFileErrorKind::Array(GridArray::PrefillIsl, NpyProblem::Malformed(_))
        ));
        let mut h = npy_bytes(&[1.0], "(1,)");
        h[8] = 0xff;
        h[9] = 0xff;
        assert!(matches!(
            refuse(&with("prefill_isl.npy", h)).kind,
            NpzFileErrorKind::Array(_, NpyProblem::Malformed(_))
        ));
        let big = npy_bytes(&[], "(99999999999, 99999999999)");
        assert!(matches!(
            refuse(&with("decode_itl.npy", big)).kind,
            NpzFileErrorKind::Array(GridArray::DecodeItl, NpyProblem::TooLarge { .. })
        ));
        // Values: unsorted axis, negative and non-finite times.
        let e = refuse(&with(
            "decode_context_length.npy",
            npy_bytes(&[110.0, 10.0], "(2,)"),
        ));
        match &e.kind {
            NpzFileErrorKind::Invalid(g) => {
                assert_eq!(g.array, GridArray::DecodeContextLength);
                assert_eq!(g.kind, GridErrorKind::NotIncreasing(1));
            }
            other => panic!("{other:?}"),
        }
        let e = refuse(&with(
            "prefill_ttft_ms.npy",
            npy_bytes(&[1.0, -2.0, 3.0], "(3,)"),
        ));
        assert_eq!(e.to_string(), "p.npz: prefill_ttft_ms: [1] is negative");
        let e = refuse(&with(
            "decode_itl.npy",
            npy_bytes(&[1.0, 2.0, f64::INFINITY, 3.0], "(2, 2)"),
        ));
        assert_eq!(e.to_string(), "p.npz: decode_itl: [1][0] is not finite");
    }

    #[test]
    fn compressed_entries_are_named() {
        // np.savez_compressed's method 8 (deflate), patched into the local
        // header (offset 8) and the central directory entry (offset 10).
        let mut data = to_npz_bytes(&arrays()).unwrap();
        for (sig, at) in [(b"PK\x03\x04", 8), (b"PK\x01\x02", 10)] {
            let pos = data.windows(4).position(|w| w == sig).unwrap();
            data[pos + at] = 8;
        }
        assert_eq!(
            refuse(&data).to_string(),
            "p.npz: prefill_isl: compressed entry (np.savez_compressed); write it with np.savez"
        );
    }

    /// Every single-byte corruption and every truncation of a valid archive
    /// is read or refused, never a panic (the zip crate and this reader both
    /// see it), and a refusal names the file.
    #[test]
    fn corrupted_archives_never_panic() {
        let good = to_npz_bytes(&arrays()).unwrap();
        for pos in 0..good.len() {
            for v in [0u8, 0xff, good[pos] ^ 0x80, good[pos].wrapping_add(1)] {
                let mut b = good.clone();
                b[pos] = v;
                if let Err(e) = parse(&b, "p.npz", "p.npz") {
                    assert!(e.to_string().starts_with("p.npz: "), "{e}");
                }
            }
            assert!(parse(&good[..pos], "p.npz", "p.npz").is_err());
        }
    }
}
