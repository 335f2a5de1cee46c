//! Errors of loading and running a model.

use std::fmt;
use std::path::PathBuf;

/// Everything that can go wrong between a model's files and its tokens.
#[derive(Debug)]
pub enum GptError {
    /// A `config.json` (or the embedded model's `config` metadata) is not a
    /// GPT-2 configuration the kernels are built for.
    Config {
        /// The file, as the user named it.
        source: String,
        /// What is wrong with it.
        msg: String,
    },
    /// A weights file is not a valid checkpoint of its config: corrupt,
    /// missing a tensor, a tensor of the wrong shape or type.
    Checkpoint {
        /// The file, as the user named it.
        file: String,
        /// What is wrong with it.
        msg: String,
    },
    /// A file could not be read.
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// `--model` is neither a directory, nor in the Hugging Face cache, nor
    /// downloadable.
    ModelNotFound {
        /// The name given.
        model: String,
        /// What was tried.
        why: String,
    },
    /// The prompt holds a character a character-level model's vocabulary
    /// lacks.
    UnknownCharacter {
        /// The character.
        c: char,
        /// The characters the vocabulary holds.
        vocab: String,
    },
    /// A prompt is empty, longer than the model's context, or encodes to
    /// token ids beyond the model's vocabulary.
    Prompt(String),
    /// A sampling parameter is out of its range.
    Sampling(String),
    /// A model can't be split over the ranks asked for, or their
    /// collectives (NCCL) can't be set up or failed.
    Parallel(String),
    /// A kernel launch or transfer failed.
    Tile(tile::Error),
}

impl fmt::Display for GptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GptError::Config { source, msg } => write!(f, "bad model config {source}: {msg}"),
            GptError::Checkpoint { file, msg } => write!(f, "bad checkpoint {file}: {msg}"),
            GptError::Io { path, error } => write!(f, "can't read {}: {error}", path.display()),
            GptError::ModelNotFound { model, why } => write!(f, "no model `{model}`: {why}"),
            GptError::UnknownCharacter { c, vocab } => {
                write!(
                    f,
                    "the character {c:?} is not in the model's vocabulary, which holds {vocab:?}"
                )
            }
            GptError::Prompt(m) => write!(f, "bad prompt: {m}"),
            GptError::Sampling(m) => write!(f, "bad sampling parameter: {m}"),
            GptError::Parallel(m) => write!(f, "tensor parallelism: {m}"),
            GptError::Tile(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for GptError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GptError::Io { error, .. } => Some(error),
            GptError::Tile(e) => Some(e),
            _ => None,
        }
    }
}

impl From<tile::Error> for GptError {
    fn from(e: tile::Error) -> GptError {
        GptError::Tile(e)
    }
}

/// A result whose error is a [`GptError`].
pub type Result<T> = std::result::Result<T, GptError>;
