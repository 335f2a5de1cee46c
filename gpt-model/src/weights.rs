//! Reading a model from a safetensors file: every tensor checked for
//! presence, type and shape, the configuration and vocabulary from the
//! file's metadata. A bad file is a typed error, never a panic.

use crate::model::Config;
use crate::{GptError, Result};
use safetensors::{Dtype, SafeTensors};

/// A parsed weights file: tensors as f32, the configuration and vocabulary.
pub struct Weights<'a> {
    file: SafeTensors<'a>,
    /// The model's shape, from the file's metadata (`vocab_size` from the
    /// vocabulary).
    pub config: Config,
    /// The vocabulary: token `i` is its `i`-th character.
    pub vocab: String,
}

fn bad(msg: impl Into<String>) -> GptError {
    GptError::Weights(msg.into())
}

impl<'a> Weights<'a> {
    /// Parses a safetensors file, borrowing `bytes`: its metadata must hold
    /// `vocab` (a JSON string) and `config` (`n_layer`, `n_head`, `n_embd`,
    /// `block_size`), with a head size the attention kernel is built for.
    /// Each tensor is converted and checked when read, by [`Weights::tensor`].
    pub fn parse(bytes: &'a [u8]) -> Result<Weights<'a>> {
        let (_, meta) = SafeTensors::read_metadata(bytes).map_err(|e| bad(format!("not a safetensors file: {e}")))?;
        let file = SafeTensors::deserialize(bytes).map_err(|e| bad(format!("not a safetensors file: {e}")))?;
        let info = meta
            .metadata()
            .as_ref()
            .ok_or_else(|| bad("no metadata (vocab and config are required)"))?;
        let field = |k: &str| info.get(k).ok_or_else(|| bad(format!("metadata has no `{k}`")));
        let vocab: String = serde_json::from_str(field("vocab")?)
            .map_err(|e| bad(format!("metadata `vocab` is not a JSON string: {e}")))?;
        let cfg: serde_json::Value =
            serde_json::from_str(field("config")?).map_err(|e| bad(format!("metadata `config` is not JSON: {e}")))?;
        let get = |k: &str| -> Result<usize> {
            cfg.get(k)
                .and_then(|v| v.as_u64())
                .filter(|&v| v > 0)
                .map(|v| v as usize)
                .ok_or_else(|| bad(format!("config has no positive integer `{k}`")))
        };
        let config = Config {
            n_layer: get("n_layer")?,
            n_head: get("n_head")?,
            n_embd: get("n_embd")?,
            block_size: get("block_size")?,
            vocab_size: vocab.chars().count(),
        };
        if config.n_embd % config.n_head != 0 || ![32, 64].contains(&(config.n_embd / config.n_head)) {
            return Err(bad(format!(
                "head size {}/{} is not supported: the attention kernel is built for 32 and 64",
                config.n_embd, config.n_head
            )));
        }
        Ok(Weights { file, config, vocab })
    }

    /// The tensor `name` as f32, checked to have `shape`.
    pub fn tensor(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let t = self
            .file
            .tensor(name)
            .map_err(|_| bad(format!("missing tensor `{name}`")))?;
        if t.shape() != shape {
            return Err(bad(format!(
                "tensor `{name}` has shape {:?}, expected {shape:?}",
                t.shape()
            )));
        }
        let data = t.data();
        let values: Vec<f32> = match t.dtype() {
            Dtype::F32 => data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            Dtype::BF16 => data
                .chunks_exact(2)
                .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            Dtype::F16 => data
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            other => {
                return Err(bad(format!(
                    "tensor `{name}` is {other:?}; f32, bf16 and f16 are supported"
                )));
            }
        };
        if values.iter().any(|v| !v.is_finite()) {
            return Err(bad(format!("tensor `{name}` holds NaN or infinite values")));
        }
        Ok(values)
    }
}
