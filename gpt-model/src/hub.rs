//! Hugging Face Hub ids resolved to local files through `hf-hub`: the local
//! cache (`$HF_HOME`, by default `~/.cache/huggingface`) first, then a
//! download when the Hub can be reached.

use crate::{GptError, Result};
use std::path::PathBuf;

/// The files a GPT-2 checkpoint needs.
const FILES: [&str; 2] = ["config.json", "model.safetensors"];

/// `config.json` and `model.safetensors` of the Hub model `id`.
pub fn files(id: &str) -> Result<(PathBuf, PathBuf)> {
    let cache = hf_hub::Cache::from_env();
    let cached = cache.model(id.to_string());
    if let [Some(config), Some(weights)] = FILES.map(|f| cached.get(f)) {
        return Ok((config, weights));
    }
    let unreachable = |why: String| GptError::ModelNotFound {
        model: id.to_string(),
        why: format!(
            "it is neither a directory nor in the Hugging Face cache ({}), and downloading it failed: {why}",
            cache.path().display()
        ),
    };
    let api = hf_hub::api::sync::ApiBuilder::from_env()
        .with_progress(true)
        .build()
        .map_err(|e| unreachable(e.to_string()))?;
    let repo = api.model(id.to_string());
    let [config, weights] = FILES.map(|f| repo.get(f).map_err(|e| unreachable(format!("{f}: {e}"))));
    Ok((config?, weights?))
}
