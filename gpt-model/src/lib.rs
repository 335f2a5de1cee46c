//! GPT-2 in the tile DSL, read like llm.c: one function per layer, each a
//! few kernel launches from `tile-kernels`.
//!
//! The default model, embedded in the binary, is a small character-level
//! GPT-2 (4 layers, 4 heads, 128 channels, 128-character context) trained on
//! Shakespeare's plays by `train/train_char_gpt.py`. The same code runs on
//! any `tile::Backend`: a GPU stream (kernels launched through the driver)
//! or, without one, `tile::Cpu` (the kernels' CPU reference versions).

#![warn(missing_docs)]

pub mod backend;
pub mod error;
pub mod model;
pub mod sample;
pub mod tokenizer;
pub mod weights;

pub use error::{GptError, Result};
pub use model::{Config, Gpt};
pub use tokenizer::CharTokenizer;
pub use weights::Weights;

/// The default model: weights and vocabulary in one safetensors file.
pub const DEFAULT_MODEL: &[u8] = include_bytes!("../assets/shakespeare-char.safetensors");
