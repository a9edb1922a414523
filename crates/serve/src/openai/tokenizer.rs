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

/// Appends the ids of `text`'s pieces to `out` (see the module docs).
pub fn tokenize_into(text: &str, out: &mut Vec<u32>) {
    let mut rest = text;
    while !rest.is_empty() {
        let len = piece_len(rest);
        out.push(piece_id(&rest[..len]));
        rest = &rest[len..];
    }
}

/// The ids of `text` (see the module docs).
pub fn tokenize(text: &str) -> Vec<u32> {
    let mut out = Vec::with_capacity(text.len() / 4 + 1);
    tokenize_into(text, &mut out);
    out
}

/// Length in bytes of the piece `s` starts with (`s` not empty).
fn piece_len(s: &str) -> usize {
    let mut chars = s.char_indices().peekable();
    let Some((_, c0)) = chars.next() else {
        return 0;
    };
    let word_start = if c0 == ' ' || c0 == '\n' {
        // A space attaches to the word after it, if one follows.
        matches!(chars.peek(), Some((_, c)) if c.is_alphanumeric())
    } else {
        c0.is_alphanumeric()
    };
    if word_start {
        let mut end = c0.len_utf8();
        for (i, c) in s.char_indices().skip(1) {
            if !c.is_alphanumeric() || i + c.len_utf8() > MAX_PIECE_BYTES {
                break;
            }
            end = i + c.len_utf8();
        }
        return end;
    }
    if c0.is_whitespace() {
        // A run of whitespace, stopping before a space that starts a word.
        let mut end = c0.len_utf8();
        let bytes: Vec<(usize, char)> = s.char_indices().collect();
        for (k, (i, c)) in bytes.iter().enumerate().skip(1) {
            if !c.is_whitespace() {
                break;
            }
            let next_is_word = bytes.get(k + 1).is_some_and(|(_, n)| n.is_alphanumeric());
            if (*c == ' ' || *c == '\n') && next_is_word {
                break;
            }
            if *i + c.len_utf8() > 64 {
                break;
            }
            end = i + c.len_utf8();
        }
        return end;
    }
    c0.len_utf8()
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
    s.push_str("<|assistant|>\n");
    s
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
    pub fn from_file(path: &std::path::Path) -> Result<Self, String> {
        tokenizers::Tokenizer::from_file(path)
            .map(|t| Tokenizer::HuggingFace(std::sync::Arc::new(t)))
            .map_err(|e| format!("--tokenizer {}: {e}", path.display()))
    }

    /// The ids of `text` as a prompt of `kind`; the error says why the
    /// tokenizer refused it.
    pub fn encode(&self, text: &str, kind: PromptKind) -> Result<Vec<u32>, String> {
        match self {
            Tokenizer::Builtin => Ok(tokenize(text)),
            Tokenizer::HuggingFace(t) => t
                .encode(text, kind == PromptKind::Completion)
                .map(|e| e.get_ids().to_vec())
                .map_err(|e| format!("the tokenizer could not encode the text: {e}")),
        }
    }
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
        let e = Tokenizer::from_file(&missing).expect_err("no such file");
        assert!(
            e.starts_with("--tokenizer ") && e.contains("missing.json"),
            "{e}"
        );
        let bad = dir.join("bad.json");
        std::fs::write(&bad, "{\"model\": 3}").expect("write");
        let e = Tokenizer::from_file(&bad).expect_err("not a tokenizer");
        assert!(e.contains("bad.json"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
        let b = Tokenizer::Builtin;
        assert_eq!(
            b.encode("hi there", PromptKind::Chat),
            Ok(tokenize("hi there"))
        );
    }

    #[test]
    fn chat_template_shape() {
        let p = chat_prompt([("system", "be brief"), ("user", "hi")]);
        assert_eq!(p, "<|system|>\nbe brief\n<|user|>\nhi\n<|assistant|>\n");
    }
}
