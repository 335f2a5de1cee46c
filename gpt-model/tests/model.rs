//! The GPT forward pass against PyTorch's logits for the embedded model, on
//! the CPU backend and (with a GPU) on the GPU; and typed errors for bad
//! weights and prompts. Without a GPU the GPU test is reported ignored,
//! with the reason (the workspace's test harness, shared with `tile`'s tests).

#[allow(dead_code)]
#[path = "../../tests/common/harness.rs"]
mod harness;

use gpt_model::{CharTokenizer, DEFAULT_MODEL, Gpt, GptError, Weights};
use harness::Test;
use std::process::ExitCode;
use std::sync::Arc;

struct Reference {
    context: String,
    first: Vec<f64>,
    last: Vec<f64>,
}

fn reference() -> Reference {
    let v: serde_json::Value = serde_json::from_str(include_str!("../assets/reference.json")).unwrap();
    let floats = |k: &str| -> Vec<f64> { v[k].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect() };
    Reference {
        context: v["context"].as_str().unwrap().to_string(),
        first: floats("first_logits"),
        last: floats("last_logits"),
    }
}

fn rel_err(got: &[f32], want: &[f64]) -> f64 {
    let num: f64 = got.iter().zip(want).map(|(a, b)| (*a as f64 - b).powi(2)).sum();
    let den: f64 = want.iter().map(|b| b * b).sum();
    (num / den).sqrt()
}

fn check_against_pytorch<B: tile::Backend>(on: &B, what: &str) {
    let weights = Weights::parse(DEFAULT_MODEL).unwrap();
    let model = Gpt::load(on, &weights).unwrap();
    let r = reference();
    let tokens = CharTokenizer::new(&weights.vocab).encode(&r.context).unwrap();
    let logits = model.forward(on, &tokens).unwrap();
    let v = model.config.vocab_size;
    let (first, last) = (&logits[..v], &logits[(tokens.len() - 1) * v..]);
    // PyTorch ran in f32 with TF32 matmuls allowed: agree to about 1e-3.
    let (e1, e2) = (rel_err(first, &r.first), rel_err(last, &r.last));
    println!("{what}: logits' relative error to PyTorch {e1:.2e} (first position), {e2:.2e} (last)");
    assert!(
        e1 < 2e-3 && e2 < 2e-3,
        "{what}: logits differ from PyTorch: {e1:.2e}, {e2:.2e}"
    );
}

fn cpu_forward_matches_pytorch() {
    check_against_pytorch(&tile::Cpu, "cpu");
}

fn gpu_forward_matches_pytorch(device: Arc<tile::Device>) {
    check_against_pytorch(&device.stream(), "gpu");
}

fn corrupt_weights_are_typed_errors() {
    let bad = |bytes: &[u8]| match Weights::parse(bytes).and_then(|w| Gpt::load(&tile::Cpu, &w).map(|_| ())) {
        Err(GptError::Weights(msg)) => msg,
        Err(other) => panic!("expected a weights error, got {other}"),
        Ok(()) => panic!("corrupt weights were accepted"),
    };
    assert!(bad(&[]).contains("not a safetensors file"));
    assert!(bad(&DEFAULT_MODEL[..DEFAULT_MODEL.len() / 2]).contains("not a safetensors file"));
    let mut flipped = DEFAULT_MODEL.to_vec();
    flipped[0] ^= 0x55;
    assert!(!bad(&flipped).is_empty());

    // A well-formed file without the model's tensors.
    let tensors: Vec<(String, safetensors::tensor::TensorView)> = vec![];
    let meta = [
        ("vocab".to_string(), "\"ab\"".to_string()),
        (
            "config".to_string(),
            r#"{"n_layer":1,"n_head":1,"n_embd":32,"block_size":8}"#.to_string(),
        ),
    ];
    let empty = safetensors::serialize(tensors, Some(meta.into_iter().collect())).unwrap();
    assert!(bad(&empty).contains("missing tensor"), "{}", bad(&empty));
}

fn prompts_outside_the_vocabulary_are_typed_errors() {
    let weights = Weights::parse(DEFAULT_MODEL).unwrap();
    let tok = CharTokenizer::new(&weights.vocab);
    let ids = tok.encode("To be, or not to be").unwrap();
    assert_eq!(tok.decode(&ids), "To be, or not to be");
    assert!(matches!(tok.encode("naïve"), Err(GptError::UnknownCharacter('ï'))));
}

fn main() -> ExitCode {
    harness::run([
        Test::new("cpu_forward_matches_pytorch", cpu_forward_matches_pytorch),
        Test::gpu("gpu_forward_matches_pytorch", gpu_forward_matches_pytorch),
        Test::new("corrupt_weights_are_typed_errors", corrupt_weights_are_typed_errors),
        Test::new(
            "prompts_outside_the_vocabulary_are_typed_errors",
            prompts_outside_the_vocabulary_are_typed_errors,
        ),
    ])
}
