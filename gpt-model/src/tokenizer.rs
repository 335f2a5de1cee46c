//! Text to tokens and back: GPT-2's byte-level BPE (`r50k_base`, bundled
//! with `tiktoken-rs`, so it works offline) for GPT-2 checkpoints, or one
//! token per character for the embedded character-level model.

use crate::{GptError, Result};
use tiktoken_rs::CoreBPE;

/// GPT-2's end-of-text token, which ends a sequence.
pub const END_OF_TEXT: u32 = 50256;

/// A model's tokenizer.
pub enum Tokenizer {
    /// Token `i` is the `i`-th character of the vocabulary.
    Chars(Vec<char>),
    /// GPT-2's byte-level BPE.
    Bpe(Box<CoreBPE>),
}

impl Tokenizer {
    /// The tokenizer of a character-level model with `vocab`.
    pub fn chars(vocab: &str) -> Tokenizer {
        Tokenizer::Chars(vocab.chars().collect())
    }

    /// GPT-2's BPE.
    pub fn gpt2() -> Tokenizer {
        // The ranks are compiled into tiktoken-rs: loading them can't fail.
        Tokenizer::Bpe(Box::new(
            tiktoken_rs::r50k_base().expect("tiktoken-rs bundles r50k_base"),
        ))
    }

    /// The tokenizer a checkpoint's model was trained with: its characters
    /// when it has a character vocabulary, else GPT-2's BPE.
    pub fn for_checkpoint(checkpoint: &crate::Checkpoint) -> Tokenizer {
        match &checkpoint.vocab {
            Some(chars) => Tokenizer::chars(chars),
            None => Tokenizer::gpt2(),
        }
    }

    /// The token that ends a sequence, if the vocabulary has one.
    pub fn end_of_text(&self) -> Option<u32> {
        match self {
            Tokenizer::Chars(_) => None,
            Tokenizer::Bpe(_) => Some(END_OF_TEXT),
        }
    }

    /// `text` as tokens; `<|endoftext|>` in it is the end-of-text token, as
    /// `transformers`' GPT-2 tokenizer reads it.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        match self {
            Tokenizer::Chars(chars) => text
                .chars()
                .map(|c| {
                    chars
                        .iter()
                        .position(|&v| v == c)
                        .map(|i| i as u32)
                        .ok_or_else(|| GptError::UnknownCharacter {
                            c,
                            vocab: chars.iter().collect(),
                        })
                })
                .collect(),
            Tokenizer::Bpe(bpe) => Ok(bpe.encode_with_special_tokens(text)),
        }
    }

    /// The bytes of `tokens`' text. A BPE token may hold part of a UTF-8
    /// character: [`TextStream`] joins such parts before printing them.
    /// Ids outside the vocabulary decode to nothing.
    pub fn decode_bytes(&self, tokens: &[u32]) -> Vec<u8> {
        match self {
            Tokenizer::Chars(chars) => tokens
                .iter()
                .filter_map(|&t| chars.get(t as usize))
                .collect::<String>()
                .into_bytes(),
            Tokenizer::Bpe(bpe) => tokens
                .iter()
                .flat_map(|&t| bpe.decode_bytes(&[t]).unwrap_or_default())
                .collect(),
        }
    }

    /// `tokens` as text, bytes that are not UTF-8 replaced by U+FFFD.
    pub fn decode(&self, tokens: &[u32]) -> String {
        String::from_utf8_lossy(&self.decode_bytes(tokens)).into_owned()
    }
}

/// Text as it is generated, a token at a time: bytes are held back until
/// they complete a UTF-8 character.
#[derive(Default)]
pub struct TextStream {
    pending: Vec<u8>,
}

impl TextStream {
    /// The text that `bytes` completes.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let valid = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            // Invalid in the middle (not just cut short): replace it.
            Err(e) if e.error_len().is_some() => self.pending.len(),
            Err(e) => e.valid_up_to(),
        };
        let done: Vec<u8> = self.pending.drain(..valid).collect();
        String::from_utf8_lossy(&done).into_owned()
    }

    /// Whatever is still held back, at the end of the text.
    pub fn finish(&mut self) -> String {
        String::from_utf8_lossy(&std::mem::take(&mut self.pending)).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bpe_round_trips_english_code_and_non_latin_text() {
        let t = Tokenizer::gpt2();
        for text in [
            "The meaning of life is",
            "fn main() {\n    println!(\"{}\", 1 + 2);\n}\n",
            "Ünïcödé, 日本語のテキスト, Ελληνικά, emoji 🦀🚀",
            "",
        ] {
            let ids = t.encode(text).unwrap();
            assert_eq!(t.decode(&ids), text);
        }
        // As transformers' GPT2TokenizerFast encodes them.
        assert_eq!(t.encode("Hello world").unwrap(), vec![15496, 995]);
        assert_eq!(t.encode("<|endoftext|>").unwrap(), vec![END_OF_TEXT]);
    }

    #[test]
    fn a_stream_holds_back_split_characters() {
        let t = Tokenizer::gpt2();
        let text = "日本語 🦀 ok";
        let ids = t.encode(text).unwrap();
        let mut stream = TextStream::default();
        let mut out = String::new();
        for id in &ids {
            let piece = stream.push(&t.decode_bytes(&[*id]));
            assert!(!piece.contains('\u{FFFD}'), "a character was split: {piece:?}");
            out += &piece;
        }
        out += &stream.finish();
        assert_eq!(out, text);
    }

    #[test]
    fn unknown_characters_name_the_vocabulary() {
        let t = Tokenizer::chars("abc ");
        assert_eq!(t.encode("a cab").unwrap(), vec![0, 3, 2, 0, 1]);
        let e = t.encode("abd").unwrap_err().to_string();
        assert!(e.contains("'d'") && e.contains("\"abc \""), "{e}");
    }
}
