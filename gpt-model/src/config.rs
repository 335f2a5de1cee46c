//! A model's shape and hyperparameters, read from a Hugging Face GPT-2
//! `config.json`.

use crate::{GptError, Result};

/// The head sizes the attention kernels are built for.
pub const HEAD_SIZES: [usize; 3] = [32, 64, 128];

/// The shape of a GPT-2 model, as `transformers`' `GPT2Config` names it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    /// Transformer blocks.
    pub n_layer: usize,
    /// Attention heads per block.
    pub n_head: usize,
    /// Channels of the residual stream.
    pub n_embd: usize,
    /// The longest context: rows of the position embedding.
    pub n_positions: usize,
    /// Tokens in the vocabulary: rows of the token embedding.
    pub vocab_size: usize,
    /// The LayerNorms' epsilon.
    pub layer_norm_epsilon: f32,
}

impl Config {
    /// Parses a GPT-2 `config.json`; `source` names the file in errors.
    ///
    /// The architecture must be GPT-2's: the tanh GELU (`gelu_new`), the LM
    /// head tied to the token embedding, and a head size the attention
    /// kernels are built for.
    pub fn from_json(text: &str, source: &str) -> Result<Config> {
        let bad = |msg: String| GptError::Config {
            source: source.to_string(),
            msg,
        };
        let json: serde_json::Value = serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
        let int = |key: &str| -> Result<usize> {
            json.get(key)
                .and_then(|v| v.as_u64())
                .filter(|&v| v > 0)
                .map(|v| v as usize)
                .ok_or_else(|| bad(format!("no positive integer `{key}`")))
        };
        let activation = json
            .get("activation_function")
            .and_then(|v| v.as_str())
            .unwrap_or("gelu_new");
        if !matches!(activation, "gelu_new" | "gelu_pytorch_tanh") {
            return Err(bad(format!(
                "activation `{activation}` is not supported: GPT-2's is `gelu_new` (the tanh GELU)"
            )));
        }
        if json.get("tie_word_embeddings").and_then(|v| v.as_bool()) == Some(false) {
            return Err(bad(
                "`tie_word_embeddings` is false: GPT-2's LM head is the token embedding".into(),
            ));
        }
        // Variants of the architecture that GPT-2's checkpoints don't use.
        let flag = |key: &str| json.get(key).and_then(|v| v.as_bool());
        if flag("scale_attn_by_inverse_layer_idx") == Some(true) || flag("scale_attn_weights") == Some(false) {
            return Err(bad(
                "attention scaled other than by 1/sqrt(head size) is not supported (scale_attn_*)".into(),
            ));
        }
        if let Some(inner) = json.get("n_inner").filter(|v| !v.is_null()) {
            let embd = json.get("n_embd").and_then(|v| v.as_u64());
            if inner.as_u64().is_none() || inner.as_u64() != embd.map(|c| 4 * c) {
                return Err(bad(format!("`n_inner` {inner} is not 4 × n_embd: the MLP is 4 × wide")));
            }
        }
        let epsilon = match json.get("layer_norm_epsilon") {
            None => 1e-5,
            Some(v) => {
                v.as_f64()
                    .filter(|e| *e > 0.0 && e.is_finite())
                    .ok_or_else(|| bad("`layer_norm_epsilon` is not a positive number".into()))? as f32
            }
        };
        let config = Config {
            n_layer: int("n_layer")?,
            n_head: int("n_head")?,
            n_embd: int("n_embd")?,
            n_positions: int("n_positions")?,
            vocab_size: int("vocab_size")?,
            layer_norm_epsilon: epsilon,
        };
        config.check().map_err(bad)?;
        Ok(config)
    }

    /// Columns of one attention head.
    pub fn head_size(&self) -> usize {
        self.n_embd / self.n_head
    }

    /// Whether the kernels are built for this shape.
    fn check(&self) -> std::result::Result<(), String> {
        if !self.n_embd.is_multiple_of(self.n_head) {
            return Err(format!(
                "n_embd {} is not a multiple of n_head {}",
                self.n_embd, self.n_head
            ));
        }
        if !HEAD_SIZES.contains(&self.head_size()) {
            return Err(format!(
                "heads of {} columns (n_embd {} / n_head {}) are not built: the attention kernels take heads of {HEAD_SIZES:?}",
                self.head_size(),
                self.n_embd,
                self.n_head
            ));
        }
        Ok(())
    }

    /// The configuration as a `config.json` would hold it.
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "model_type": "gpt2",
            "n_layer": self.n_layer,
            "n_head": self.n_head,
            "n_embd": self.n_embd,
            "n_positions": self.n_positions,
            "vocab_size": self.vocab_size,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "activation_function": "gelu_new",
            "tie_word_embeddings": true,
        })
        .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GPT2: &str = r#"{"activation_function": "gelu_new", "n_embd": 768, "n_head": 12,
        "n_layer": 12, "n_positions": 1024, "vocab_size": 50257, "layer_norm_epsilon": 1e-05,
        "model_type": "gpt2", "n_ctx": 1024}"#;

    #[test]
    fn reads_gpt2s_config() {
        let c = Config::from_json(GPT2, "config.json").unwrap();
        assert_eq!(
            (c.n_layer, c.n_head, c.n_embd, c.n_positions, c.vocab_size),
            (12, 12, 768, 1024, 50257)
        );
        assert_eq!(c.head_size(), 64);
        assert_eq!(Config::from_json(&c.to_json(), "x").unwrap(), c);
    }

    #[test]
    fn bad_configs_name_the_file_and_the_field() {
        let err = |text: &str| Config::from_json(text, "some/config.json").unwrap_err().to_string();
        assert!(err("{").contains("some/config.json"));
        assert!(err(&GPT2.replace("\"n_head\": 12", "\"n_head\": 0")).contains("`n_head`"));
        assert!(err(&GPT2.replace("\"n_head\": 12", "\"n_head\": 48")).contains("are not built"));
        assert!(err(&GPT2.replace("\"n_head\": 12", "\"n_head\": 5")).contains("not a multiple"));
        assert!(err(&GPT2.replace("gelu_new", "relu")).contains("relu"));
        assert!(err(&GPT2.replace("1e-05", "-1")).contains("layer_norm_epsilon"));
        assert!(err(&GPT2.replace("\"n_ctx\"", "\"n_inner\": 1000, \"n_ctx\"")).contains("n_inner"));
        assert!(
            err(&GPT2.replace("\"n_ctx\"", "\"scale_attn_by_inverse_layer_idx\": true, \"n_ctx\""))
                .contains("scale_attn")
        );
        assert!(Config::from_json(&GPT2.replace("\"n_ctx\"", "\"n_inner\": null, \"n_ctx\""), "x").is_ok());
    }
}
