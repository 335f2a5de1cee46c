//! Where a model's weights come from and how they are read: a Hugging Face
//! directory (`config.json` + `model.safetensors`, memory-mapped), a Hub id
//! resolved through the local cache or a download, or the embedded default
//! model (one safetensors file whose metadata holds the config and the
//! character vocabulary). Every tensor is checked for presence, type, shape
//! and finiteness; a bad file is a typed error naming it, never a panic.

use crate::config::Config;
use crate::{GptError, Result};
use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};
use std::path::Path;

/// The default model: a character-level GPT-2 trained on Shakespeare's
/// plays by `train/train_char_gpt.py`, in the Hugging Face layout.
pub const DEFAULT_MODEL: &[u8] = include_bytes!("../assets/shakespeare-char.safetensors");

/// The bytes of a safetensors file.
enum Bytes {
    Embedded(&'static [u8]),
    Mapped(Mmap),
}

/// A checkpoint: its configuration, its tensors, and the character
/// vocabulary when the model has one (else it uses GPT-2's BPE).
pub struct Checkpoint {
    bytes: Bytes,
    /// The safetensors file, as errors name it.
    file: String,
    /// The model's shape.
    pub config: Config,
    /// The characters of a character-level model, token `i` being the `i`-th.
    pub vocab: Option<String>,
}

impl Checkpoint {
    /// The embedded default model.
    pub fn embedded() -> Result<Checkpoint> {
        Checkpoint::from_embedded(DEFAULT_MODEL, "the embedded model")
    }

    /// A single safetensors file whose metadata holds `config` (a
    /// `config.json`'s text) and, for a character-level model, `vocab`.
    pub fn from_embedded(bytes: &'static [u8], name: &str) -> Result<Checkpoint> {
        let bad = |msg: String| GptError::Checkpoint {
            file: name.to_string(),
            msg,
        };
        let (_, meta) = SafeTensors::read_metadata(bytes).map_err(|e| bad(format!("not a safetensors file: {e}")))?;
        let info = meta.metadata().clone().unwrap_or_default();
        let config = info
            .get("config")
            .ok_or_else(|| bad("its metadata has no `config`".into()))?;
        let config = Config::from_json(config, &format!("{name} (metadata `config`)"))?;
        let vocab = match info.get("vocab") {
            None => None,
            Some(v) => Some(
                serde_json::from_str::<String>(v)
                    .map_err(|e| bad(format!("metadata `vocab` is not a JSON string: {e}")))?,
            ),
        };
        let checkpoint = Checkpoint {
            bytes: Bytes::Embedded(bytes),
            file: name.to_string(),
            config,
            vocab,
        };
        checkpoint.tensors()?;
        Ok(checkpoint)
    }

    /// A directory in the Hugging Face layout: `config.json` and
    /// `model.safetensors`, the latter memory-mapped.
    pub fn from_dir(dir: &Path) -> Result<Checkpoint> {
        Checkpoint::from_files(&dir.join("config.json"), &dir.join("model.safetensors"))
    }

    /// `--model`'s value: a directory holding `config.json` and
    /// `model.safetensors`, or a Hugging Face Hub id (`gpt2`,
    /// `openai-community/gpt2-medium`, ..), taken from the local Hugging Face
    /// cache when it is there and downloaded otherwise.
    pub fn open(model: &str) -> Result<Checkpoint> {
        let dir = Path::new(model);
        if dir.is_dir() {
            return Checkpoint::from_dir(dir);
        }
        let (config, weights) = crate::hub::files(model)?;
        Checkpoint::from_files(&config, &weights)
    }

    fn from_files(config: &Path, weights: &Path) -> Result<Checkpoint> {
        let io = |path: &Path, e: std::io::Error| GptError::Io {
            path: path.to_path_buf(),
            error: e,
        };
        let text = std::fs::read_to_string(config).map_err(|e| io(config, e))?;
        let config = Config::from_json(&text, &config.display().to_string())?;
        let file = std::fs::File::open(weights).map_err(|e| io(weights, e))?;
        // SAFETY: the map is read-only; a checkpoint that another process
        // truncates while it is mapped is outside what this reader guards.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| io(weights, e))?;
        let checkpoint = Checkpoint {
            bytes: Bytes::Mapped(map),
            file: weights.display().to_string(),
            config,
            vocab: None,
        };
        checkpoint.tensors()?;
        Ok(checkpoint)
    }

    fn tensors(&self) -> Result<SafeTensors<'_>> {
        let bytes = match &self.bytes {
            Bytes::Embedded(b) => b,
            Bytes::Mapped(m) => &m[..],
        };
        SafeTensors::deserialize(bytes).map_err(|e| self.bad(format!("not a safetensors file: {e}")))
    }

    fn bad(&self, msg: String) -> GptError {
        GptError::Checkpoint {
            file: self.file.clone(),
            msg,
        }
    }

    /// The tensor `name` (with or without the `transformer.` prefix that
    /// `GPT2LMHeadModel` checkpoints add) as f32, row-major, checked to have
    /// `shape`.
    pub fn tensor(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let tensors = self.tensors()?;
        let t = tensors
            .tensor(name)
            .or_else(|_| tensors.tensor(&format!("transformer.{name}")))
            .map_err(|_| self.bad(format!("missing tensor `{name}`")))?;
        if t.shape() != shape {
            return Err(self.bad(format!("tensor `{name}` has shape {:?}, expected {shape:?}", t.shape())));
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
                return Err(self.bad(format!("tensor `{name}` is {other:?}; f32, bf16 and f16 are supported")));
            }
        };
        if values.iter().any(|v| !v.is_finite()) {
            return Err(self.bad(format!("tensor `{name}` holds NaN or infinite values")));
        }
        Ok(values)
    }

    /// A `Conv1D` weight (`[inp, out]`, as GPT-2 stores its projections)
    /// transposed once to `[out, inp]`, the `x @ w^T` layout of the linear
    /// kernels.
    pub fn conv1d(&self, name: &str, inp: usize, out: usize) -> Result<Vec<f32>> {
        let w = self.tensor(name, &[inp, out])?;
        let mut t = vec![0.0; w.len()];
        for i in 0..inp {
            for o in 0..out {
                t[o * inp + i] = w[i * out + o];
            }
        }
        Ok(t)
    }

    /// Where the weights came from, as errors name it.
    pub fn file(&self) -> &str {
        &self.file
    }
}
