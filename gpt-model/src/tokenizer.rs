//! The character tokenizer of the default model: one token per character.

use crate::{GptError, Result};

/// Maps characters to tokens and back: token `i` is the `i`-th character of
/// the model's vocabulary.
#[derive(Clone, Debug)]
pub struct CharTokenizer {
    chars: Vec<char>,
}

impl CharTokenizer {
    /// A tokenizer whose token `i` is the `i`-th character of `vocab`.
    pub fn new(vocab: &str) -> CharTokenizer {
        CharTokenizer {
            chars: vocab.chars().collect(),
        }
    }

    /// The number of tokens (characters in the vocabulary).
    pub fn vocab_size(&self) -> usize {
        self.chars.len()
    }

    /// The tokens of `text`, one per character; a character outside the
    /// vocabulary is [`GptError::UnknownCharacter`].
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        text.chars()
            .map(|c| {
                self.chars
                    .iter()
                    .position(|&v| v == c)
                    .map(|i| i as u32)
                    .ok_or(GptError::UnknownCharacter(c))
            })
            .collect()
    }

    /// The text of `tokens`, one character each; tokens outside the vocabulary
    /// are skipped.
    pub fn decode(&self, tokens: &[u32]) -> String {
        tokens.iter().filter_map(|&t| self.chars.get(t as usize)).collect()
    }
}
