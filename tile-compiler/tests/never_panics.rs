//! The compiler never panics: `#[tile::kernel]` runs inside rustc, where a
//! panic is an unreadable "proc macro panicked" instead of an error at the
//! mistake. This test mutates valid kernels many thousands of times —
//! deleting, duplicating and swapping tokens, and replacing names, numbers and
//! operators with others from the DSL's vocabulary — and checks that every
//! mutant compiles (each variant with PTX text) or fails with a message, and
//! that nothing panics. Panicking inputs are shrunk and listed.
//!
//! Deterministic; `TILE_FUZZ_ITERS=N` runs N mutants instead of the default,
//! `TILE_FUZZ_SEED=S` draws another sequence of them.

use std::cell::RefCell;
use std::panic::{self, AssertUnwindSafe};

/// Valid kernels: `(attribute, fn item)`. Specialization lists are short so
/// that each compile is quick.
const SEEDS: &[(&str, &str)] = &[
    (
        "BLOCK = [1024]",
        "fn axpy<const BLOCK: usize>(a: f32, x: &Tensor<f32>, y: &mut Tensor<f32>) {
            let i = block_id(0);
            let t = a * x.load([i], [BLOCK]) + y.load([i], [BLOCK]);
            y.store([i], t);
        }",
    ),
    (
        "T = [f32, bf16], BLOCK = [256]",
        "fn gelu<T, const BLOCK: usize>(x: &Tensor<T>, out: &mut Tensor<T>) {
            let i = block_id(0);
            let v = x.load([i], [BLOCK]).cast::<f32>();
            let inner = 0.7978845608028654 * (v + 0.044715 * v * v * v);
            out.store([i], (0.5 * v * (1.0 + tanh(inner))).cast::<T>());
        }",
    ),
    (
        "T = [f16], BLOCK = [128, 1024]",
        "fn softmax<T, const BLOCK: usize>(x: &Tensor<T>, y: &mut Tensor<T>) {
            let rows = max(1, 1024 / BLOCK);
            let r = block_id(0);
            let t = x.load([r, 0], [rows, BLOCK]).pad(f32::NEG_INFINITY).cast::<f32>();
            let e = exp(t - t.max(1));
            y.store([r, 0], (e * (1.0 / e.sum(1))).cast::<T>());
        }",
    ),
    (
        "T = [f32], BLOCK = [512]",
        "fn softmax_online<T, const BLOCK: usize>(x: &Tensor<T>, y: &mut Tensor<T>) {
            let row = block_id(0);
            let tiles = cdiv(x.shape(1), BLOCK);
            let mut m = full([1, 1], f32::NEG_INFINITY);
            let mut l = zeros([1, 1]);
            for j in 0..tiles {
                let t = x.load([row, j], [1, BLOCK]).pad(f32::NEG_INFINITY).cast::<f32>();
                let m_new = max(m, t.max(1));
                l = l * exp(m - m_new) + exp(t - m_new).sum(1);
                m = m_new;
            }
            let inv = 1.0 / l;
            for j in 0..tiles {
                let t = x.load([row, j], [1, BLOCK]).cast::<f32>();
                y.store([row, j], (exp(t - m) * inv).cast::<T>());
            }
        }",
    ),
    (
        "T = [bf16], BLOCK = [1024]",
        "fn layer_norm<T, const BLOCK: usize>(x: &Tensor<T>, weight: &Tensor<T>, bias: &Tensor<T>, y: &mut Tensor<T>, eps: f32) {
            let rows = max(1, 4096 / BLOCK);
            let r = block_id(0);
            let n = x.shape(1) as f32;
            let t = x.load([r, 0], [rows, BLOCK]).cast::<f32>();
            let mean = t.sum(1) / n;
            let centered = select(arange(BLOCK) < x.shape(1), t - mean, 0.0);
            let rstd = rsqrt((centered * centered).sum(1) / n + eps);
            let w = weight.load([0], [BLOCK]).cast::<f32>();
            let b = bias.load([0], [BLOCK]).cast::<f32>();
            y.store([r, 0], (centered * rstd * w + b).cast::<T>());
        }",
    ),
    (
        "T = [f32], BLOCK = [256]",
        "fn embedding<T, const BLOCK: usize>(tokens: &Tensor<i32>, wte: &Tensor<T>, wpe: &Tensor<T>, out: &mut Tensor<T>, seq_len: i32) {
            let i = block_id(0);
            let j = block_id(1);
            let token = wte.load([tokens.get([i]), j], [1, BLOCK]).cast::<f32>();
            let position = wpe.load([i % seq_len, j], [1, BLOCK]).cast::<f32>();
            out.store([i, j], (token + position).cast::<T>());
        }",
    ),
    (
        "ROWS = [4], BLOCK = [64], num_warps = 2",
        "fn centered_bias<const ROWS: usize, const BLOCK: usize>(x: &Tensor<f32>, b: &Tensor<f32>, y: &mut Tensor<f32>, scale: f32) {
            let r = block_id(0);
            let t = x.load([r, 0], [ROWS, BLOCK]);
            let bias = b.load([0], [BLOCK]);
            let mean = t.sum(1) / BLOCK as f32;
            let out = (t - mean) * scale + bias;
            let left = arange(BLOCK) < BLOCK / 2;
            y.store([r, 0], select(left, out, 0.0));
        }",
    ),
    (
        "",
        "fn maybe_scale(x: &Tensor<f32>, y: &mut Tensor<f32>, flag: i32, n: u32) {
            let i = block_id(0);
            let mut s = 1.0;
            if flag == 1 {
                s = 3.0;
            } else if flag == 2 {
                s = -1.0;
            }
            let k = (n as i32) * 2 + num_blocks(0);
            y.store([i], x.load([i], [32]) * s + k as f32);
        }",
    ),
    (
        "BLOCK = [32, 128]",
        "fn small_or_large<const BLOCK: usize>(x: &Tensor<f32>, y: &mut Tensor<i32>) {
            let i = block_id(0);
            let t = x.load([i], [BLOCK]);
            if BLOCK < 64 {
                let pairs = t.reshape([64 / BLOCK, BLOCK / 2]).transpose();
                y.store([i], (pairs * 2.0).reshape([BLOCK]).cast::<i32>());
            } else {
                let m = t.expand_dims(0).argmax(1);
                y.store([i], (abs(t) >= 1.0).cast::<i32>() + m.reshape([1]));
            }
        }",
    ),
    (
        "BLOCK = [64], num_warps = 4",
        "fn constants<const BLOCK: usize>(x: &Tensor<i32>, y: &mut Tensor<u32>) {
            let i = block_id(0) * (BLOCK / 32 * 2 - 3) + (1 << 4) % 7;
            let k = max(BLOCK * 1024 - 65536, -(BLOCK >> 2)) + i32::MAX / 2147483647;
            let t = x.load([i, k], [BLOCK / 64, BLOCK]).pad(-1) & 255 | 3 ^ 1;
            y.store([i, 0], (t == 2 || t != 3 && !(t < 1)).cast::<u32>() + 7u32);
        }",
    ),
    (
        "R = [16], C = [64]",
        "fn gather_rows<const R: usize, const C: usize>(ids: &Tensor<i32>, table: &Tensor<f32>, out: &mut Tensor<f32>, perm: &Tensor<i32>, moved: &mut Tensor<f32>) {
            let b = block_id(0);
            let rows = ids.load([b], [R]).reshape([R, 1]);
            let cols = arange(C).reshape([1, C]);
            let picked = table.gather([rows, cols]).pad(-1.0);
            out.store([b, 0], picked);
            let dest = perm.load([b], [R]).pad(-1);
            moved.scatter([dest], picked.sum(1).reshape([R]));
        }",
    ),
    (
        "BLOCK = [16]",
        "fn row_mean<const BLOCK: usize>(x: &Tensor<f32>, y: &mut Tensor<f32>) {
            let r = block_id(0);
            let tiles = cdiv(x.shape(1), BLOCK);
            let mut acc = zeros([1, BLOCK]);
            let mut n = 0;
            for j in 0..tiles {
                acc = acc + x.load([r, j], [1, BLOCK]).permute([0, 1]);
                n += 1;
            }
            let acc = acc.broadcast_to([2, BLOCK]).min(0);
            y.store([r, 0], acc.sum(1) / (n * BLOCK) as f32 + sqrt(exp2(log2(2.0))));
        }",
    ),
];

/// Small inputs that panicked when this test was written (found by it, then
/// shrunk by hand): checked first, so that each fix stays fixed whatever the
/// random mutants happen to reach.
const REGRESSIONS: &[(&str, &str)] = &[
    // A rank-0 tensor: `get([])` or `scatter([], ..)` is its only use.
    (
        "",
        "fn k(t: &Tensor<i32>, y: &mut Tensor<i32>) { y.store([0], full([32], t.get([]))); }",
    ),
    (
        "",
        "fn k(x: &Tensor<f32>, y: &mut Tensor<f32>) { y.scatter([], x.load([0], [32])); }",
    ),
    // Constant folding past i64.
    (
        "",
        "fn k(x: &Tensor<f32>, y: &mut Tensor<f32>) { let n = 9223372036854775807 + 1; y.store([0], x.load([0], [32])); }",
    ),
    (
        "",
        "fn k(x: &Tensor<f32>, y: &mut Tensor<f32>) { y.store([0], x.load([0], [4294967296 * 4294967296])); }",
    ),
    (
        "",
        "fn k(x: &Tensor<f32>, y: &mut Tensor<f32>) { let n = (0 - 9223372036854775807 - 1) / -1; y.store([0], x.load([0], [32])); }",
    ),
    (
        "",
        "fn k(x: &Tensor<f32>, y: &mut Tensor<f32>) { let n = (0 - 9223372036854775807 - 1) % -1; y.store([0], x.load([0], [32])); }",
    ),
    (
        "",
        "fn k(x: &Tensor<f32>, y: &mut Tensor<f32>) { let n = -(0 - 9223372036854775807 - 1); y.store([0], x.load([0], [32])); }",
    ),
    // Tile element counts past usize.
    (
        "",
        "fn k(y: &mut Tensor<f32>) { y.store([0, 0], full([4294967296, 4294967296], 1.0)); }",
    ),
    (
        "BLOCK = [4611686018427387904]",
        "fn k<const BLOCK: usize>(y: &mut Tensor<f32>) { y.store([0, 0], zeros([BLOCK, 4])); }",
    ),
];

/// Names the DSL knows, Rust keywords it rejects, and names of the seeds.
#[rustfmt::skip]
const IDENTS: &[&str] = &[
    "block_id", "num_blocks", "arange", "full", "zeros", "exp", "exp2", "log", "log2", "sqrt", "rsqrt",
    "tanh", "erf", "abs", "max", "min", "select", "cdiv", "load", "store", "gather", "scatter", "get",
    "shape", "pad", "sum", "argmax", "argmin", "cast", "reshape", "broadcast_to", "expand_dims",
    "transpose", "permute", "mma", "thread_idx", "syncthreads", "atomic_add", "f32", "f16", "bf16", "i32",
    "u32", "bool", "usize", "f64", "Tensor", "T", "BLOCK", "ROWS", "x", "y", "i", "j", "t", "r", "let",
    "mut", "for", "in", "if", "else", "while", "loop", "match", "fn", "const", "unsafe", "async", "return",
    "break", "continue", "true", "false", "INFINITY", "NEG_INFINITY", "MAX", "MIN", "as", "self", "where",
    "num_warps", "_",
];

/// Numbers at and past every limit the compiler checks.
#[rustfmt::skip]
const NUMBERS: &[&str] = &[
    "0", "1", "2", "3", "7", "31", "32", "33", "63", "64", "100", "1024", "4096", "65536", "131072",
    "2147483647", "2147483648", "4294967295", "4294967296", "9223372036854775807", "18446744073709551615",
    "-1", "-9223372036854775808", "0.0", "-0.0", "0.5", "1.5", "1e30", "1e-45", "3u32", "7i32", "2f32",
    "1.0f32", "5u8", "2.5f64",
];

/// Operators and delimiters.
#[rustfmt::skip]
const OPS: &[&str] = &[
    "+", "-", "*", "/", "%", "&", "|", "^", "<<", ">>", "==", "!=", "<", "<=", ">", ">=", "&&", "||", "!",
    "=", "+=", "-=", "*=", "/=", "%=", "<<=", "..", "..=", "::", ".", ",", ";", ":", "(", ")", "[", "]",
    "{", "}", "->", "=>", "&mut", "?", "#", "'a",
];

/// Interchangeable tokens: swapping one for another of its class often keeps
/// a kernel valid, so these mutants reach the later compiler stages.
#[rustfmt::skip]
const CLASSES: &[&[&str]] = &[
    &["exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh", "erf", "abs"],
    &["sum", "max", "min", "argmax", "argmin"],
    &["f32", "f16", "bf16", "i32", "u32"],
    &["+", "-", "*", "/", "%", "&", "|", "^", "<<", ">>"],
    &["==", "!=", "<", "<=", ">", ">=", "&&", "||"],
    &["0", "1", "2", "4", "8", "16", "32", "64", "128", "256", "512", "1024", "2048", "4096", "8192"],
    &["transpose", "expand_dims", "reshape", "broadcast_to", "permute", "cast"],
    &["load", "gather", "store", "scatter", "get", "shape"],
    &["block_id", "num_blocks", "arange", "zeros"],
];

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Ident,
    Number,
    Punct,
}

fn kind(tok: &str) -> Kind {
    let c = tok.chars().next().unwrap_or(' ');
    if c.is_ascii_digit() {
        Kind::Number
    } else if c.is_alphabetic() || c == '_' {
        Kind::Ident
    } else {
        Kind::Punct
    }
}

/// Splits Rust source into tokens (enough of Rust's lexer for the seeds).
fn lex(src: &str) -> Vec<String> {
    const MULTI: &[&str] = &[
        "<<=", ">>=", "..=", "...", "::", "->", "=>", "==", "!=", "<=", ">=", "&&", "||", "+=", "-=", "*=", "/=", "%=",
        "^=", "&=", "|=", "<<", ">>", "..",
    ];
    let s: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < s.len() && (s[i].is_alphanumeric() || s[i] == '_') {
                i += 1;
            }
            out.push(s[start..i].iter().collect());
        } else if c.is_ascii_digit() {
            let start = i;
            while i < s.len() && (s[i].is_alphanumeric() || s[i] == '_') {
                i += 1;
            }
            if i + 1 < s.len() && s[i] == '.' && s[i + 1].is_ascii_digit() {
                i += 1;
                while i < s.len() && (s[i].is_alphanumeric() || s[i] == '_') {
                    i += 1;
                }
            }
            out.push(s[start..i].iter().collect());
        } else {
            let rest: String = s[i..s.len().min(i + 3)].iter().collect();
            let op = MULTI.iter().find(|m| rest.starts_with(*m)).map_or(1, |m| m.len());
            out.push(s[i..i + op].iter().collect());
            i += op;
        }
    }
    out
}

/// One random edit of `toks`.
fn mutate(rng: &mut Rng, toks: &mut Vec<String>) {
    if toks.is_empty() {
        toks.push(rng.pick(IDENTS).to_string());
        return;
    }
    let at = rng.below(toks.len());
    match rng.below(12) {
        0 => {
            toks.remove(at);
        }
        1 => {
            let t = toks[at].clone();
            toks.insert(at, t);
        }
        2 => {
            let other = if rng.below(2) == 0 {
                (at + 1).min(toks.len() - 1)
            } else {
                rng.below(toks.len())
            };
            toks.swap(at, other);
        }
        3 => {
            let vocab = [IDENTS, NUMBERS, OPS][rng.below(3)];
            toks.insert(at, rng.pick(vocab).to_string());
        }
        4..=6 => {
            // Replace a token by another of its class, searching from `at`.
            let found = (0..toks.len()).map(|k| (at + k) % toks.len()).find_map(|k| {
                let class = CLASSES.iter().find(|c| c.contains(&toks[k].as_str()))?;
                Some((k, *class))
            });
            if let Some((pos, class)) = found {
                toks[pos] = rng.pick(class).to_string();
            }
        }
        _ => {
            // Replace a token by one of its own kind, searching from `at`.
            let want = [Kind::Ident, Kind::Number, Kind::Punct][rng.below(3)];
            let Some(pos) = (0..toks.len())
                .map(|k| (at + k) % toks.len())
                .find(|&k| kind(&toks[k]) == want)
            else {
                return;
            };
            let vocab = match want {
                Kind::Ident => IDENTS,
                Kind::Number => NUMBERS,
                Kind::Punct => OPS,
            };
            toks[pos] = rng.pick(vocab).to_string();
        }
    }
}

thread_local! {
    /// Where and why the last panic on this thread happened.
    static LAST_PANIC: RefCell<String> = const { RefCell::new(String::new()) };
}

/// What compiling one input did.
#[derive(PartialEq)]
enum Outcome {
    /// Compiled: every variant has PTX and the expansion is non-empty.
    Compiled,
    /// Rejected with a message.
    Rejected,
    /// Panicked (the message and where), or broke the contract another way.
    Broken(String),
}

impl Outcome {
    fn broken(self) -> Option<String> {
        match self {
            Outcome::Broken(why) => Some(why),
            _ => None,
        }
    }
}

/// Compiles one input (and expands it, as the macro does), catching panics.
fn compile_catching(attr: &str, item: &str) -> Outcome {
    let result = panic::catch_unwind(AssertUnwindSafe(|| match tile_compiler::compile_str(attr, item) {
        Ok(k) => {
            for v in &k.variants {
                if v.ptx.text().is_none_or(str::is_empty) {
                    return Outcome::Broken(format!("variant `{}` has no PTX text", v.entry));
                }
            }
            // The macro's other half: the generated Rust (CPU version included).
            if tile_compiler::expand::expand(&k).is_empty() {
                return Outcome::Broken("the expansion is empty".to_string());
            }
            Outcome::Compiled
        }
        Err(e) if e.message.trim().is_empty() => Outcome::Broken("an error with an empty message".to_string()),
        Err(_) => Outcome::Rejected,
    }));
    result.unwrap_or_else(|_| Outcome::Broken(LAST_PANIC.with(|p| p.borrow().clone())))
}

/// Simplifies `toks` while `fails` holds. Candidates are token runs with
/// balanced brackets starting at each token and ending a statement, an
/// argument, a group or a method receiver (or just that one token): each is deleted, or replaced by one of its
/// names or numbers. One pass, left to right: a reduction, not a minimum.
fn shrink(toks: &[String], mut fails: impl FnMut(&[String]) -> bool) -> Vec<String> {
    let mut cur = toks.to_vec();
    let mut i = 0;
    while i < cur.len() {
        let mut ends = Vec::new();
        let mut depth = 0i32;
        for (j, tok) in cur.iter().enumerate().skip(i) {
            match tok.as_str() {
                "(" | "[" | "{" => depth += 1,
                ")" | "]" | "}" => depth -= 1,
                _ => {}
            }
            if depth < 0 {
                break;
            }
            let closes = matches!(tok.as_str(), ";" | "," | ")" | "]" | "}");
            if depth == 0 && (j == i || closes || cur.get(j + 1).is_some_and(|n| n == "." || n == ";")) {
                ends.push(j + 1);
            }
        }
        let mut simpler = None;
        'runs: for &end in ends.iter().rev() {
            let mut fillers: Vec<&String> = Vec::new();
            if end - i > 1 {
                for t in &cur[i..end] {
                    if kind(t) != Kind::Punct && !fillers.contains(&t) && fillers.len() < 2 {
                        fillers.push(t);
                    }
                }
            }
            let replacements = std::iter::once(None).chain(fillers.into_iter().map(Some));
            for with in replacements {
                let mut cand = cur[..i].to_vec();
                cand.extend(with.cloned());
                cand.extend_from_slice(&cur[end..]);
                if fails(&cand) {
                    simpler = Some(cand);
                    break 'runs;
                }
            }
        }
        match simpler {
            // The tokens at `i` changed: try them again.
            Some(cand) => cur = cand,
            None => i += 1,
        }
    }
    cur
}

/// The place a panic message names: `(at file:line)`.
fn location(why: &str) -> &str {
    why.rsplit_once("(at ").map_or(why, |(_, at)| at)
}

#[test]
fn mutated_kernels_never_panic() {
    let iters: usize = std::env::var("TILE_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30_000);
    let seed: u64 = std::env::var("TILE_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    for (attr, item) in SEEDS {
        if let Err(e) = tile_compiler::compile_str(attr, item) {
            panic!("seed `{item}` must compile: {}", e.message);
        }
    }
    let quiet_hook = panic::take_hook();
    panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let at = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        LAST_PANIC.with(|p| *p.borrow_mut() = format!("{msg} (at {at})"));
    }));

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed.wrapping_mul(0x2545_f491_4f6c_dd1d));
    rng.next();
    let mut report = Vec::new();
    // Where known inputs panic: a mutant that panics there adds nothing.
    let mut known = Vec::new();
    for (a, t) in REGRESSIONS {
        if let Some(why) = compile_catching(a, t).broken() {
            report.push(format!("  {why}\n    #[tile::kernel({a})] {t}"));
            known.push(location(&why).to_string());
        }
    }
    // Distinct new panics (by where they happen) and one input that shows each.
    let mut found: Vec<(String, String, String)> = Vec::new();
    let mut compiled = 0;
    for n in 0..iters {
        let (attr, item) = SEEDS[n % SEEDS.len()];
        let (mut a, mut t) = (lex(attr), lex(item));
        for _ in 0..1 + rng.below(3) {
            if rng.below(8) == 0 {
                mutate(&mut rng, &mut a);
            } else {
                mutate(&mut rng, &mut t);
            }
        }
        let (a, t) = (a.join(" "), t.join(" "));
        let outcome = compile_catching(&a, &t);
        compiled += usize::from(outcome == Outcome::Compiled);
        if let Some(why) = outcome.broken() {
            let seen = known.iter().any(|k| k == location(&why));
            if !seen && !found.iter().any(|(w, _, _)| location(w) == location(&why)) {
                found.push((why, a, t));
            }
        }
    }

    println!(
        "{iters} mutants: {compiled} compiled, {} rejected or broken",
        iters - compiled
    );

    // Shrink each new panic's input to a small one that panics at the same place.
    for (why, a, t) in &found {
        let (at, tt) = (lex(a), lex(t));
        // At most this many compiles per input, to bound the test's time.
        let mut budget = 5000;
        let mut same = |a: &[String], t: &[String]| {
            budget -= 1;
            budget > 0
                && compile_catching(&a.join(" "), &t.join(" "))
                    .broken()
                    .is_some_and(|w| location(&w) == location(why))
        };
        let tt = shrink(&tt, |t| same(&at, t));
        let at = shrink(&at, |a| same(a, &tt));
        let (a, t) = (at.join(" "), tt.join(" "));
        let why = compile_catching(&a, &t).broken().unwrap_or_else(|| why.clone());
        report.push(format!("  {why}\n    #[tile::kernel({a})] {t}"));
    }
    panic::set_hook(quiet_hook);
    assert!(
        report.is_empty(),
        "the compiler panicked on {} input(s) instead of returning an error:\n{}",
        report.len(),
        report.join("\n")
    );
}
