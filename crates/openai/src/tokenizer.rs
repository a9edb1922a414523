//! The stand-in tokenizer: deterministic, dependency-free, and good enough
//! that real prompts sharing a text prefix share token ids, so they share
//! KV blocks and hit the prefix cache as they would on a real engine.
//!
//! # The rule
//! The text is cut into pieces: a run of alphanumeric characters (with the
//! one space or newline before it, if any, as GPT-style tokenizers attach
//! it), at most [`MAX_PIECE_BYTES`] bytes long (a longer word is cut at
//! char boundaries); every other non-space character is a piece of its own;
//! runs of whitespace not attached to a word are one piece. A piece's id is
//! `256 + fnv1a64(piece bytes) mod (VOCAB - 256)`: stable across platforms
//! and runs. Ids below 256 are never produced (reserved, as byte-level
//! vocabularies keep them for raw bytes).
//!
//! The same text always gives the same ids, and a text that extends another
//! gives ids that extend the other's, except possibly at the last piece of
//! the shorter one (a word cut in the middle), which is how real BPE
//! tokenizers behave too. Output text is synthetic: [`synthetic_piece`]
//! picks a word for each generated token from a fixed list.

/// Vocabulary size ids are drawn from (Llama-3's, roughly).
pub const VOCAB: u32 = 128_256;

/// Longest piece, in bytes (real tokenizers average about four bytes of
/// English per token).
pub const MAX_PIECE_BYTES: usize = 6;

/// 64-bit FNV-1a.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn piece_id(piece: &str) -> u32 {
    256 + (fnv1a64(piece.as_bytes()) % u64::from(VOCAB - 256)) as u32
}

/// Longest run of whitespace one piece holds, in bytes; with
/// [`MAX_PIECE_BYTES`] and a char's 4 bytes it bounds every piece, so a
/// text of `n` bytes has at least `n / MAX_ANY_PIECE_BYTES` (rounded up)
/// pieces.
pub const MAX_SPACE_RUN_BYTES: usize = 64;

/// The longest piece of any kind, in bytes (see [`MAX_SPACE_RUN_BYTES`]).
pub const MAX_ANY_PIECE_BYTES: usize = MAX_SPACE_RUN_BYTES;

/// Appends the ids of `text`'s pieces to `out` (see the module docs).
pub fn tokenize_into(text: &str, out: &mut Vec<u32>) {
    let _ = tokenize_bounded_into(text, usize::MAX, out);
}

/// Appends the ids of `text`'s pieces to `out`, stopping once more than
/// `limit` have been appended: `Err(limit + 1)` then (the text has at
/// least that many), `Ok(count)` otherwise. A text whose bytes already
/// make more than `limit` pieces certain is refused before any is cut.
/// Work is linear in the bytes read: each piece looks at no more than
/// two chars past its end.
pub fn tokenize_bounded_into(text: &str, limit: usize, out: &mut Vec<u32>) -> Result<usize, usize> {
    let at_least = min_pieces(text.len());
    if at_least > limit {
        return Err(at_least);
    }
    let mut rest = text;
    let mut n = 0usize;
    while !rest.is_empty() {
        if n == limit {
            return Err(limit.saturating_add(1));
        }
        let len = piece_len(rest);
        out.push(piece_id(&rest[..len]));
        rest = &rest[len..];
        n += 1;
    }
    Ok(n)
}

/// The fewest pieces a text of `bytes` bytes can have.
pub fn min_pieces(bytes: usize) -> usize {
    bytes.div_ceil(MAX_ANY_PIECE_BYTES)
}

/// The ids of `text` (see the module docs).
pub fn tokenize(text: &str) -> Vec<u32> {
    let mut out = Vec::with_capacity(text.len() / 4 + 1);
    tokenize_into(text, &mut out);
    out
}

/// Length in bytes of the piece `s` starts with (`s` not empty).
fn piece_len(s: &str) -> usize {
    scan_piece(s).0
}

/// The piece `s` starts with: its length in bytes, and how many chars were
/// looked at to find it (at most `2 * MAX_SPACE_RUN_BYTES + 2`, whatever
/// follows: the cut never depends on more than the next two chars).
fn scan_piece(s: &str) -> (usize, usize) {
    let mut it = s.char_indices();
    let Some((_, c0)) = it.next() else {
        return (0, 0);
    };
    let mut looked = 1;
    let starts_word = |it: &std::str::CharIndices<'_>, looked: &mut usize| {
        *looked += 1;
        it.clone().next().is_some_and(|(_, c)| c.is_alphanumeric())
    };
    let word_start = if c0 == ' ' || c0 == '\n' {
        // A space attaches to the word after it, if one follows.
        starts_word(&it, &mut looked)
    } else {
        c0.is_alphanumeric()
    };
    let mut end = c0.len_utf8();
    if word_start {
        for (i, c) in it {
            looked += 1;
            if !c.is_alphanumeric() || i + c.len_utf8() > MAX_PIECE_BYTES {
                break;
            }
            end = i + c.len_utf8();
        }
        return (end, looked);
    }
    if c0.is_whitespace() {
        // A run of whitespace, stopping before a space that starts a word.
        while let Some((i, c)) = it.clone().next() {
            looked += 1;
            if !c.is_whitespace() {
                break;
            }
            let mut after = it.clone();
            after.next();
            if (c == ' ' || c == '\n') && starts_word(&after, &mut looked) {
                break;
            }
            if i + c.len_utf8() > MAX_SPACE_RUN_BYTES {
                break;
            }
            end = i + c.len_utf8();
            it.next();
        }
        return (end, looked);
    }
    (end, looked)
}

/// Renders chat messages as one prompt: `<|role|>\n` then the content and a
/// newline per message, then `<|assistant|>\n` (a generic template; real
/// engines use the model's own, which changes counts, not sharing).
pub fn chat_prompt<'a>(messages: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut s = String::new();
    for (role, content) in messages {
        s.push_str("<|");
        s.push_str(role);
        s.push_str("|>\n");
        s.push_str(content);
        s.push('\n');
    }
    s.push_str(GENERATION_PROMPT);
    s
}

/// What [`chat_prompt`] ends with: the assistant's turn opened.
pub const GENERATION_PROMPT: &str = "<|assistant|>\n";

/// The pieces the stand-in rule cuts `text` into (see the module docs), in
/// order; their ids are [`tokenize`]'s.
pub fn pieces(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let len = piece_len(rest);
        out.push(&rest[..len]);
        rest = &rest[len..];
    }
    out
}

/// The tokenizer prompts go through (`serve --tokenizer`).
#[derive(Clone, Default)]
pub enum Tokenizer {
    /// The stand-in rule of this module.
    #[default]
    Builtin,
    /// A Hugging Face `tokenizer.json`, loaded with the `tokenizers` crate,
    /// so a router given the same file computes the same ids.
    HuggingFace(std::sync::Arc<tokenizers::Tokenizer>),
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tokenizer::Builtin => f.write_str("Builtin"),
            Tokenizer::HuggingFace(_) => f.write_str("HuggingFace"),
        }
    }
}

/// Where a prompt is tokenised: which decides the special tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PromptKind {
    /// A completions prompt: encoded with the tokenizer's special tokens
    /// (`add_special_tokens=True`, as vLLM's completions endpoint does).
    Completion,
    /// A chat prompt rendered by [`chat_prompt`]: the template carries the
    /// structure, so no special tokens are added
    /// (`add_special_tokens=False`, as vLLM does after a chat template).
    Chat,
}

impl Tokenizer {
    /// Loads a Hugging Face `tokenizer.json` from `path`; the error names
    /// the file.
    pub fn from_file(path: &std::path::Path) -> Result<Self, TokenizerFileError> {
        use handoff_workload::file::{read_bytes, FileKind};
        let fail = |source| TokenizerFileError {
            path: path.to_path_buf(),
            source,
        };
        // A regular file of at most the tokenizer limit, opened without
        // blocking: never a FIFO or a device read without end.
        let bytes = read_bytes("--tokenizer", path, FileKind::Tokenizer)
            .map_err(|e| fail(Box::new(e.problem)))?;
        tokenizers::Tokenizer::from_bytes(&bytes)
            .map(|t| Tokenizer::HuggingFace(std::sync::Arc::new(t)))
            .map_err(fail)
    }

    /// The ids of `text` as a prompt of `kind`; the error says why the
    /// tokenizer refused it.
    pub fn encode(&self, text: &str, kind: PromptKind) -> Result<Vec<u32>, EncodeError> {
        self.encode_at_most(text, kind, usize::MAX)
    }

    /// The ids of `text` as a prompt of `kind` if there are at most
    /// `limit`. The built-in rule refuses a text whose byte length alone
    /// makes more certain before cutting any piece, and stops cutting at
    /// `limit + 1`; a Hugging Face tokenizer's pieces have no byte bound,
    /// so its text is encoded whole and then counted.
    pub fn encode_at_most(
        &self,
        text: &str,
        kind: PromptKind,
        limit: usize,
    ) -> Result<Vec<u32>, EncodeError> {
        match self {
            Tokenizer::Builtin => {
                let mut out = Vec::with_capacity((text.len() / 4 + 1).min(limit.saturating_add(1)));
                tokenize_bounded_into(text, limit, &mut out)
                    .map(|_| out)
                    .map_err(|at_least| EncodeError::TooMany { at_least })
            }
            Tokenizer::HuggingFace(t) => {
                let ids = t
                    .encode(text, kind == PromptKind::Completion)
                    .map(|e| e.get_ids().to_vec())
                    .map_err(|e| {
                        EncodeError::Refused(format!(
                            "the tokenizer could not encode the text: {e}"
                        ))
                    })?;
                if ids.len() > limit {
                    return Err(EncodeError::TooMany {
                        at_least: ids.len(),
                    });
                }
                Ok(ids)
            }
        }
    }
}

/// A `tokenizer.json` ([`Tokenizer::from_file`]) that could not be loaded.
/// `Display` names the flag and the file as the command line prints them:
/// `--tokenizer PATH: why`.
#[derive(Debug)]
pub struct TokenizerFileError {
    /// The file.
    pub path: std::path::PathBuf,
    /// Why (unreadable, not JSON, not a tokenizer).
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

impl std::fmt::Display for TokenizerFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "--tokenizer {}: {}", self.path.display(), self.source)
    }
}

impl std::error::Error for TokenizerFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

/// Why [`Tokenizer::encode_at_most`] gave no ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// The text has more tokens than the limit: at least `at_least`.
    TooMany {
        /// A lower bound on the text's token count (exact for a Hugging
        /// Face tokenizer).
        at_least: usize,
    },
    /// The tokenizer could not encode the text.
    Refused(String),
}

const WORDS: [&str; 16] = [
    " the", " model", " says", " hello", " and", " then", " mocks", " a", " token", " of", " KV",
    " cache", " on", " decode", " prefill", ".",
];

/// The text of generated token `i` of the request seeded `seed`.
pub fn synthetic_piece(seed: u64, i: u32) -> &'static str {
    let h = handoff_core::request::mix64(seed ^ u64::from(i).wrapping_mul(0x9e37_79b9));
    WORDS[(h % WORDS.len() as u64) as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_in_range() {
        let a = tokenize("Hello, world! The quick brown fox.");
        let b = tokenize("Hello, world! The quick brown fox.");
        assert_eq!(a, b);
        assert!(a.iter().all(|t| (256..VOCAB).contains(t)));
        // "Hello" "," " world" "!" " The" " quick" " brown" " fox" "."
        assert_eq!(a.len(), 9);
    }

    #[test]
    fn shared_text_prefix_shares_ids() {
        let sys = "You are a helpful assistant. Answer briefly and precisely. ";
        let a = tokenize(&format!("{sys}What is a KV cache?"));
        let b = tokenize(&format!("{sys}Explain prefill and decode."));
        let common = tokenize(sys.trim_end()).len();
        assert_eq!(a[..common], b[..common]);
        assert_ne!(a, b);
    }

    #[test]
    fn long_words_are_cut_and_every_byte_is_covered() {
        let t = tokenize("supercalifragilistic");
        assert!(t.len() >= 20 / MAX_PIECE_BYTES);
        for s in ["", " ", "   \n\t", "ünïcödé wörds", "a\u{0}b", "🙂🙂 x"] {
            let mut n = 0;
            let mut rest = s;
            while !rest.is_empty() {
                let l = piece_len(rest);
                assert!(l > 0 && rest.is_char_boundary(l));
                rest = &rest[l..];
                n += 1;
            }
            assert_eq!(tokenize(s).len(), n);
        }
    }

    /// A missing or malformed tokenizer.json is an error naming the flag
    /// and the file, not a panic.
    #[test]
    fn bad_tokenizer_files_are_named_errors() {
        let dir = std::env::temp_dir().join(format!("handoff-tok-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let missing = dir.join("missing.json");
        let e = Tokenizer::from_file(&missing)
            .expect_err("no such file")
            .to_string();
        assert!(
            e.starts_with("--tokenizer ") && e.contains("missing.json"),
            "{e}"
        );
        let bad = dir.join("bad.json");
        std::fs::write(&bad, "{\"model\": 3}").expect("write");
        let e = Tokenizer::from_file(&bad)
            .expect_err("not a tokenizer")
            .to_string();
        assert!(e.contains("bad.json"), "{e}");
        // A device or a directory is refused before any read: never an
        // endless read of /dev/zero.
        for (path, what) in [("/dev/zero", "character device"), ("/", "directory")] {
            let e = Tokenizer::from_file(std::path::Path::new(path))
                .expect_err("not a regular file")
                .to_string();
            assert!(e.starts_with("--tokenizer ") && e.contains(what), "{e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
        let b = Tokenizer::Builtin;
        assert_eq!(
            b.encode("hi there", PromptKind::Chat),
            Ok(tokenize("hi there"))
        );
    }

    /// The rule as first written (each whitespace piece collected the rest
    /// of the text to look one char ahead): the reference the linear scan
    /// must cut exactly as.
    fn reference_piece_len(s: &str) -> usize {
        let chars: Vec<(usize, char)> = s.char_indices().collect();
        let Some(&(_, c0)) = chars.first() else {
            return 0;
        };
        let next_word = |k: usize| chars.get(k).is_some_and(|(_, c)| c.is_alphanumeric());
        let word_start = if c0 == ' ' || c0 == '\n' {
            next_word(1)
        } else {
            c0.is_alphanumeric()
        };
        let mut end = c0.len_utf8();
        for (k, &(i, c)) in chars.iter().enumerate().skip(1) {
            let stop = if word_start {
                !c.is_alphanumeric() || i + c.len_utf8() > MAX_PIECE_BYTES
            } else if c0.is_whitespace() {
                !c.is_whitespace()
                    || ((c == ' ' || c == '\n') && next_word(k + 1))
                    || i + c.len_utf8() > MAX_SPACE_RUN_BYTES
            } else {
                true
            };
            if stop {
                break;
            }
            end = i + c.len_utf8();
        }
        end
    }

    /// Chars looked at to cut all of `text`.
    fn work(text: &str) -> usize {
        let (mut rest, mut looked) = (text, 0);
        while !rest.is_empty() {
            let (len, l) = scan_piece(rest);
            looked += l;
            rest = &rest[len..];
        }
        looked
    }

    /// The prompt (`" ,"` repeated): every whitespace piece used to
    /// look at the whole rest of the text. Counted, not timed: each char
    /// is looked at at most three times (its own piece, and as one of the
    /// two chars of lookahead of the piece before).
    #[test]
    fn work_is_linear_on_the_quadratic_prompt() {
        for n in [1_000usize, 10_000, 100_000] {
            let text = " ,".repeat(n);
            let chars = text.chars().count();
            let w = work(&text);
            assert!(w <= 3 * chars, "{w} chars looked at for {chars}");
        }
    }

    /// A text whose byte length alone makes it too long is refused before
    /// any piece is cut; one that turns out too long stops one piece past
    /// the limit.
    #[test]
    fn the_limit_stops_the_cutting_early() {
        let mut out = Vec::new();
        let big = " ,".repeat(320_000);
        assert_eq!(
            tokenize_bounded_into(&big, 9_999, &mut out),
            Err(10_000),
            "640,000 bytes make at least 10,000 pieces"
        );
        assert!(out.is_empty(), "refused by its bytes, nothing cut");
        let words = "a ".repeat(1_000);
        assert_eq!(tokenize_bounded_into(&words, 100, &mut out), Err(101));
        assert_eq!(out.len(), 100);
        out.clear();
        assert_eq!(tokenize_bounded_into("hi there", 2, &mut out), Ok(2));
        assert_eq!(out, tokenize("hi there"));
        let t = Tokenizer::Builtin;
        assert_eq!(
            t.encode_at_most(&big, PromptKind::Completion, 100),
            Err(EncodeError::TooMany { at_least: 10_000 })
        );
    }

    proptest::proptest! {
        /// On any text over an alphabet of the cases the rule tells apart,
        /// the linear scan cuts exactly as the reference, and its work per
        /// char is at most three looks.
        #[test]
        fn scan_is_the_reference_rule_at_linear_cost(
            picks in proptest::collection::vec(0usize..10, 0..400)
        ) {
            const ALPHABET: [&str; 10] = [" ", ",", "\n", "a", "Z9", "\t", "é", "🙂", "\u{3000}", "  "];
            let text: String = picks.iter().map(|&i| ALPHABET[i]).collect();
            let mut rest = text.as_str();
            while !rest.is_empty() {
                let len = piece_len(rest);
                proptest::prop_assert_eq!(len, reference_piece_len(rest), "at {:?}", rest);
                proptest::prop_assert!(len <= MAX_ANY_PIECE_BYTES);
                rest = &rest[len..];
            }
            proptest::prop_assert!(work(&text) <= 3 * text.chars().count());
            proptest::prop_assert!(tokenize(&text).len() >= min_pieces(text.len()));
        }
    }

    #[test]
    fn chat_template_shape() {
        let p = chat_prompt([("system", "be brief"), ("user", "hi")]);
        assert_eq!(p, "<|system|>\nbe brief\n<|user|>\nhi\n<|assistant|>\n");
    }
}
