//! Generates text with the embedded Shakespeare model (or a weights file),
//! on the GPU when there is one and on the kernels' CPU versions otherwise.
//!
//! `cargo run --release -p gpt-model --bin generate -- --prompt "ROMEO:" --tokens 300`

use clap::Parser;
use gpt_model::{CharTokenizer, DEFAULT_MODEL, Gpt, GptError, Weights, sample::Sampler};
use std::io::Write;
use std::time::Instant;

#[derive(Parser)]
#[command(about = "Generate text with a GPT written in the tile DSL")]
struct Args {
    /// Text to continue.
    #[arg(long, default_value = "ROMEO:\n")]
    prompt: String,
    /// Characters to generate.
    #[arg(long, default_value_t = 300)]
    tokens: usize,
    /// Sampling temperature; 0 picks the most likely character.
    #[arg(long, default_value_t = 0.8)]
    temperature: f32,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run the kernels' CPU reference versions even when a GPU is present.
    #[arg(long)]
    cpu: bool,
    /// A safetensors model file instead of the embedded one.
    #[arg(long)]
    weights: Option<std::path::PathBuf>,
}

fn run<B: tile::Backend>(on: &B, weights: &Weights, args: &Args) -> Result<(), GptError> {
    let model = Gpt::load(on, weights)?;
    let tokenizer = CharTokenizer::new(&weights.vocab);
    let mut tokens = tokenizer.encode(&args.prompt)?;
    if tokens.is_empty() {
        tokens = tokenizer.encode("\n")?;
    }
    let mut sampler = Sampler::new(args.seed, args.temperature);
    print!("{}", args.prompt);
    let start = Instant::now();
    let vocab = model.config.vocab_size;
    for _ in 0..args.tokens {
        let window = &tokens[tokens.len().saturating_sub(model.config.block_size)..];
        let logits = model.forward(on, window)?;
        let next = sampler.pick(&logits[(window.len() - 1) * vocab..]);
        tokens.push(next);
        print!("{}", tokenizer.decode(&[next]));
        std::io::stdout().flush().ok();
    }
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "\n\n[{} characters in {secs:.2} s, {:.1} per second]",
        args.tokens,
        args.tokens as f64 / secs
    );
    Ok(())
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let bytes = match &args.weights {
        Some(path) => match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("can't read {}: {e}", path.display());
                return std::process::ExitCode::FAILURE;
            }
        },
        None => DEFAULT_MODEL.to_vec(),
    };
    let result = Weights::parse(&bytes).and_then(|weights| {
        let gpu = if args.cpu { None } else { Some(tile::Device::new(0)) };
        match gpu {
            Some(Ok(device)) => {
                eprintln!("[running on {} through the CUDA driver]", device.name());
                run(&device.stream(), &weights, &args)
            }
            other => {
                let why = match other {
                    Some(Err(e)) => format!("no usable GPU: {e}"),
                    _ => "--cpu".to_string(),
                };
                eprintln!("[{why}; running the kernels' CPU reference versions]");
                run(&tile::Cpu, &weights, &args)
            }
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
