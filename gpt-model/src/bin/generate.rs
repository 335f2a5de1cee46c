//! Generates text with a GPT-2 written in the tile DSL: the embedded
//! Shakespeare model by default, or OpenAI's GPT-2 (or any checkpoint of its
//! architecture) from a Hugging Face directory or Hub id; on the GPU when
//! there is one, else on the kernels' CPU versions.
//!
//! `cargo run --release -p gpt-model --bin generate -- --model gpt2 --prompt "The meaning of life is"`

use clap::{Parser, ValueEnum};
use gpt_model::{
    Checkpoint, Collective, Float, GptError, Output, Request, Sampling, TensorParallel, TextStream, Tokenizer,
};
use half::{bf16, f16};
use std::io::{ErrorKind, Write};
use std::process::ExitCode;
use std::time::Instant;

#[derive(Parser)]
#[command(about = "Generate text with a GPT-2 written in the tile DSL")]
struct Args {
    /// A directory holding config.json and model.safetensors, or a Hugging
    /// Face Hub id (gpt2, gpt2-medium, gpt2-large, gpt2-xl, ..); by default
    /// the embedded character-level Shakespeare model.
    #[arg(long)]
    model: Option<String>,
    /// Text to continue; repeat for a batch (one sequence per prompt).
    #[arg(long)]
    prompt: Vec<String>,
    /// A file of prompts, one a line, added to the batch.
    #[arg(long)]
    prompts: Option<std::path::PathBuf>,
    /// Tokens to generate per sequence.
    #[arg(long, visible_alias = "tokens", default_value_t = 300)]
    max_new_tokens: usize,
    /// Sampling temperature; 0 picks the most likely token (greedy).
    #[arg(long, default_value_t = 0.8)]
    temperature: f32,
    /// Sample among the k most likely tokens only (and any as likely as the k-th).
    #[arg(long)]
    top_k: Option<usize>,
    /// Sample among the fewest most likely tokens whose probability reaches p
    /// (and any as likely as the last of them).
    #[arg(long)]
    top_p: Option<f32>,
    /// Seeds the sampling: the same seed gives the same text.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The element type the model runs in (f32 multiplies through tf32 on
    /// the tensor cores).
    #[arg(long, value_enum, default_value_t = Dtype::F32)]
    dtype: Dtype,
    /// With `--dtype f32`: multiply in IEEE f32 on the CUDA cores instead of
    /// through tf32 on the tensor cores (what `transformers` computes in
    /// f32, several times slower).
    #[arg(long)]
    no_tf32: bool,
    /// Run the kernels' CPU versions even when a GPU is present.
    #[arg(long, conflicts_with = "gpus")]
    cpu: bool,
    /// Split the model over this many GPUs (tensor parallelism: GPUs 0 to
    /// N-1; two NVLink GPUs sum a decode step's partial results with the
    /// DSL's one-shot all-reduce, the rest goes through NCCL).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    gpus: Option<u32>,
    /// Keep generating past the end-of-text token, to the length asked for
    /// (for timing a fixed number of tokens).
    #[arg(long)]
    ignore_eos: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum Dtype {
    F32,
    Bf16,
    F16,
}

/// What ended a run early: an error, or a reader that closed the output.
enum Failure {
    Model(GptError),
    Output(std::io::Error),
}

impl From<GptError> for Failure {
    fn from(e: GptError) -> Failure {
        Failure::Model(e)
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        // `generate | head`: the reader has what it wanted.
        Err(Failure::Output(e)) if e.kind() == ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(Failure::Output(e)) => {
            eprintln!("error: writing the output: {e}");
            ExitCode::FAILURE
        }
        Err(Failure::Model(e)) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), Failure> {
    let sampling = Sampling {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        seed: args.seed,
    }
    .validate()?;
    let loading = Instant::now();
    let checkpoint = match &args.model {
        Some(m) => Checkpoint::open(m)?,
        None => Checkpoint::embedded()?,
    };
    let tokenizer = Tokenizer::for_checkpoint(&checkpoint);
    let mut texts = args.prompt.clone();
    if let Some(path) = &args.prompts {
        let file = std::fs::read_to_string(path).map_err(|error| GptError::Io {
            path: path.clone(),
            error,
        })?;
        texts.extend(file.lines().filter(|l| !l.is_empty()).map(str::to_string));
    }
    if texts.is_empty() {
        texts.push(
            if checkpoint.vocab.is_some() {
                "ROMEO:\n"
            } else {
                "The meaning of life is"
            }
            .to_string(),
        );
    }
    let prompts = texts
        .iter()
        .map(|t| tokenizer.encode(t))
        .collect::<gpt_model::Result<Vec<_>>>()?;
    let request = Request {
        prompts,
        max_new_tokens: args.max_new_tokens,
        sampling,
        stop: tokenizer.end_of_text().filter(|_| !args.ignore_eos),
    };
    request.check(&checkpoint.config)?;
    let job = Job {
        checkpoint: &checkpoint,
        tokenizer: &tokenizer,
        texts: &texts,
        request: &request,
        loading,
        no_tf32: args.no_tf32,
    };
    if let Some(n) = args.gpus {
        let devices = (0..n as usize)
            .map(tile::Device::new)
            .collect::<tile::Result<Vec<_>>>()
            .map_err(|e| GptError::Parallel(format!("--gpus {n}: {e}")))?;
        let names: Vec<&str> = devices.iter().map(|d| d.name()).collect();
        match n {
            1 => eprintln!("[running on {} through the CUDA driver]", names.join("")),
            _ => eprintln!(
                "[running on {n} GPUs ({}) through the CUDA driver and NCCL]",
                names.join(", ")
            ),
        }
        return job.run_in(devices.iter().map(|d| d.stream()).collect(), args.dtype);
    }
    let device = if args.cpu { None } else { Some(tile::Device::new(0)) };
    match device {
        Some(Ok(device)) => {
            eprintln!("[running on {} through the CUDA driver]", device.name());
            job.run_in(vec![device.stream()], args.dtype)
        }
        other => {
            let why = match other {
                Some(Err(e)) => format!("no usable GPU: {e}"),
                _ => "--cpu".to_string(),
            };
            eprintln!("[{why}; running the kernels' CPU versions]");
            job.run_in(vec![tile::Cpu], args.dtype)
        }
    }
}

/// One invocation's inputs, run on a backend in an element type.
struct Job<'a> {
    checkpoint: &'a Checkpoint,
    tokenizer: &'a Tokenizer,
    texts: &'a [String],
    request: &'a Request,
    loading: Instant,
    no_tf32: bool,
}

impl Job<'_> {
    /// Runs on `ranks` (one, or the GPUs the model is split over).
    fn run_in<B>(&self, ranks: Vec<B>, dtype: Dtype) -> Result<(), Failure>
    where
        B: Collective<f32> + Collective<bf16> + Collective<f16>,
    {
        match dtype {
            Dtype::F32 => self.run::<B, f32>(ranks),
            Dtype::Bf16 => self.run::<B, bf16>(ranks),
            Dtype::F16 => self.run::<B, f16>(ranks),
        }
    }

    fn run<B: Collective<T>, T: Float>(&self, ranks: Vec<B>) -> Result<(), Failure> {
        let mut model: TensorParallel<B, T> = TensorParallel::load(ranks, self.checkpoint)?;
        model.allow_tf32(!self.no_tf32);
        let load = self.loading.elapsed();
        let batch = self.texts.len();
        let mut stdout = std::io::stdout().lock();
        let mut streams: Vec<TextStream> = (0..batch).map(|_| TextStream::default()).collect();
        let mut written: std::io::Result<()> = Ok(());
        // One sequence streams as it comes; a batch prints each sequence
        // whole at the end.
        if batch == 1 {
            written = write!(stdout, "{}", self.texts[0]).and_then(|_| stdout.flush());
        }
        let output = model.generate(self.request, |s, token| {
            if batch == 1 && written.is_ok() {
                let text = streams[s].push(&self.tokenizer.decode_bytes(&[token]));
                written = write!(stdout, "{text}").and_then(|_| stdout.flush());
            }
            written.is_ok()
        })?;
        written.map_err(Failure::Output)?;
        if batch == 1 {
            writeln!(stdout, "{}", streams[0].finish()).map_err(Failure::Output)?;
        } else {
            for (i, (text, tokens)) in self.texts.iter().zip(&output.tokens).enumerate() {
                let generated = self.tokenizer.decode(tokens);
                writeln!(stdout, "=== sequence {} ===\n{text}{generated}\n", i + 1).map_err(Failure::Output)?;
            }
        }
        report(&output, load, model.ranks());
        Ok(())
    }
}

/// Times and sizes, on stderr.
fn report<B: tile::Backend>(o: &Output, load: std::time::Duration, ranks: &[B]) {
    let generated: usize = o.tokens.iter().map(Vec::len).sum();
    let per_second = |n: usize, d: std::time::Duration| n as f64 / d.as_secs_f64().max(1e-9);
    let held: Option<tile::Result<usize>> = ranks
        .iter()
        .map(|on| on.stream().map(|s| s.device().memory_in_use()))
        .sum();
    let memory = match held {
        Some(Ok(bytes)) => format!(
            "; GPU memory held at the end {:.0} MiB (the allocator keeps what it freed)",
            bytes as f64 / (1 << 20) as f64
        ),
        _ => String::new(),
    };
    // No token asked for: no prefill ran, so there are no rates to give.
    let timings = if o.prefill.is_zero() {
        "no prefill or decode step ran".to_string()
    } else {
        format!(
            "first token after {:.1} ms; prefill {:.0} tokens/s; decode {} tokens at {:.1} tokens/s",
            o.time_to_first_token.as_secs_f64() * 1e3,
            per_second(o.prompt_tokens, o.prefill),
            o.decode_tokens,
            per_second(o.decode_tokens, o.decode),
        )
    };
    eprintln!(
        "\n[load {:.2} s; {} prompt tokens; {timings}; {generated} tokens generated{memory}; stops {:?}]",
        load.as_secs_f64(),
        o.prompt_tokens,
        o.stops,
    );
}
