//! GPT-2 in the tile DSL, read like llm.c: one function per layer, each a
//! few kernel launches from `tile-kernels`, on any `tile::Backend` — a GPU
//! stream (kernels launched through the driver) or `tile::Cpu` (the
//! kernels' CPU versions).
//!
//! Load → prefill → decode step → sample:
//!
//! ```
//! use gpt_model::{Checkpoint, Gpt, Sampler, Sampling, Tokenizer};
//!
//! # fn main() -> gpt_model::Result<()> {
//! let checkpoint = Checkpoint::embedded()?; // or Checkpoint::open("gpt2")?
//! let tokenizer = Tokenizer::for_checkpoint(&checkpoint);
//! let on = tile::Cpu; // or a GPU: tile::Device::new(0)?.stream()
//! let model: Gpt<_, f32> = Gpt::load(&on, &checkpoint)?;
//! let prompt = tokenizer.encode("ROMEO:")?;
//! let mut cache = model.cache(&on, 1, 32)?;
//! let mut logits = model.prefill(&on, &mut cache, &[prompt])?;
//! let mut sampler = Sampler::new(Sampling::GREEDY);
//! for _ in 0..4 {
//!     let next = sampler.pick(&logits);
//!     print!("{}", tokenizer.decode(&[next]));
//!     logits = model.decode(&on, &mut cache, &[Some(next)])?;
//! }
//! # Ok(())
//! # }
//! ```
//!
//! [`generate()`] runs that loop for a batch of prompts, streaming tokens as
//! they come. [`TensorParallel`] splits a model over several GPUs (or CPU
//! ranks, threads of one process), Megatron style, with the same API. The default model, embedded in the binary, is a small
//! character-level GPT-2 trained on Shakespeare's plays by
//! `train/train_char_gpt.py`; [`Checkpoint::open`] reads OpenAI's GPT-2
//! (and any checkpoint of its architecture) from a Hugging Face directory
//! or the Hub.

#![warn(missing_docs)]

mod activations;
pub mod checkpoint;
pub mod config;
pub mod error;
pub mod generate;
mod hub;
pub mod kv_cache;
pub mod model;
pub mod parallel;
pub mod sample;
pub mod shard;
pub mod tokenizer;

pub use checkpoint::{Checkpoint, DEFAULT_MODEL};
pub use config::Config;
pub use error::{GptError, Result};
pub use generate::{Output, Request, Stop, generate};
pub use kv_cache::{Feed, KvCache};
pub use model::{Float, Gpt};
pub use parallel::{Collective, ShardedCache, TensorParallel};
pub use sample::{Draw, Sampler, Sampling};
pub use shard::Shard;
pub use tokenizer::{TextStream, Tokenizer};
