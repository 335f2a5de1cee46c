//! Errors of loading and running a model.

use std::fmt;

/// Why loading a model, encoding a prompt or running the model failed.
#[derive(Debug)]
pub enum GptError {
    /// The weights file is not a valid model: corrupt, missing a tensor, a
    /// tensor of the wrong shape or type, or bad metadata.
    Weights(String),
    /// The prompt holds a character the model's vocabulary lacks.
    UnknownCharacter(char),
    /// A kernel launch or transfer failed.
    Tile(tile::Error),
}

impl fmt::Display for GptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GptError::Weights(m) => write!(f, "bad model weights: {m}"),
            GptError::UnknownCharacter(c) => write!(f, "the character {c:?} is not in the model's vocabulary"),
            GptError::Tile(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for GptError {}

impl From<tile::Error> for GptError {
    fn from(e: tile::Error) -> GptError {
        GptError::Tile(e)
    }
}

/// The result of a model call: `T`, or the [`GptError`] that stopped it.
pub type Result<T> = std::result::Result<T, GptError>;
