//! Autotuning: the first time a problem of some class runs on a GPU, time
//! each candidate specialization and keep the fastest. Choices are cached in
//! memory and in a file (`$TILE_CACHE_DIR/autotune.tsv`, else
//! `$XDG_CACHE_HOME/tile/` or `~/.cache/tile/`), keyed by kernel, problem
//! class, GPU and target (sm_90a variants differ from portable ones), so
//! later runs and later processes skip the timing.
//!
//! On the CPU ([`crate::Cpu`]) nothing is timed: [`tune`] runs the first
//! candidate. `TILE_AUTOTUNE=0` turns tuning off (the first candidate is used);
//! `TILE_LOG=autotune` prints each choice to stderr.
//!
//! Tuning runs the kernel several times on the caller's buffers: only tune
//! launches whose result doesn't depend on what the output held before.

use crate::{Backend, Element, Result};
use std::collections::{HashMap, HashSet};
use std::fmt::Display;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

fn cache() -> &'static Mutex<HashMap<String, String>> {
    static CACHE: OnceLock<Mutex<HashMap<String, String>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(read_file()))
}

fn cache_file() -> Option<PathBuf> {
    let dir = match std::env::var_os("TILE_CACHE_DIR") {
        Some(d) => PathBuf::from(d),
        None => match std::env::var_os("XDG_CACHE_HOME") {
            Some(d) => PathBuf::from(d).join("tile"),
            None => PathBuf::from(std::env::var_os("HOME")?).join(".cache").join("tile"),
        },
    };
    Some(dir.join("autotune.tsv"))
}

fn read_file() -> HashMap<String, String> {
    let Some(text) = cache_file().and_then(|p| std::fs::read_to_string(p).ok()) else {
        return HashMap::new();
    };
    parse(&text)
}

fn parse(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Appends a choice to the cache file; a file that can't be written only costs a re-tune.
fn remember(path: Option<&std::path::Path>, key: &str, choice: &str) {
    let Some(path) = path else { return };
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = writeln!(f, "{key}\t{choice}");
    }
}

fn enabled() -> bool {
    std::env::var("TILE_AUTOTUNE").map_or(true, |v| v != "0")
}

fn logging() -> bool {
    std::env::var("TILE_LOG").is_ok_and(|v| v.split(',').any(|s| s == "autotune"))
}

/// Logs a lone candidate's use, once per key (it is used on every call,
/// and cached nowhere: a problem of the same class may have more candidates).
fn log_once(key: &str, only: impl Display) {
    static LOGGED: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let logged = LOGGED.get_or_init(Default::default);
    if logging() && logged.lock().expect("autotune log").insert(key.to_string()) {
        eprintln!("tile autotune: {key} -> {only} (the only candidate: not timed)");
    }
}

/// The candidate to use for `key`: the cached choice (candidates are
/// cached by their names, as `Display` writes them), or the one `measure`
/// finds fastest, which is then cached. Candidates `measure` rejects are
/// skipped; when tuning is off, the first candidate; a lone candidate is
/// used without measuring it.
pub fn choose<C: Copy + Display>(key: &str, candidates: &[C], measure: impl FnMut(C) -> Result<f64>) -> Result<C> {
    if !enabled() {
        return Ok(candidates[0]);
    }
    choose_in(cache(), cache_file().as_deref(), key, candidates, measure)
}

/// [`choose`] with an explicit memory cache and cache file.
fn choose_in<C: Copy + Display>(
    cache: &Mutex<HashMap<String, String>>,
    file: Option<&std::path::Path>,
    key: &str,
    candidates: &[C],
    mut measure: impl FnMut(C) -> Result<f64>,
) -> Result<C> {
    assert!(!candidates.is_empty(), "autotuning needs at least one candidate");
    if let [only] = candidates {
        log_once(key, only);
        return Ok(*only);
    }
    if let Some(c) = cache.lock().expect("autotune cache").get(key)
        && let Some(&found) = candidates.iter().find(|x| x.to_string() == *c)
    {
        return Ok(found);
    }
    let mut best: Option<(C, f64)> = None;
    let mut first_error = None;
    let mut timings = Vec::new();
    for &c in candidates {
        match measure(c) {
            Ok(ms) => {
                timings.push(format!("{c} {ms:.3} ms"));
                if best.is_none_or(|(_, b)| ms < b) {
                    best = Some((c, ms));
                }
            }
            Err(e) => {
                timings.push(format!("{c} failed: {e}"));
                first_error.get_or_insert(e);
            }
        }
    }
    let Some((choice, _)) = best else {
        return Err(first_error.expect("every candidate failed"));
    };
    if logging() {
        eprintln!("tile autotune: {key} -> {choice} ({})", timings.join(", "));
    }
    cache
        .lock()
        .expect("autotune cache")
        .insert(key.to_string(), choice.to_string());
    remember(file, key, &choice.to_string());
    Ok(choice)
}

/// Launches of a candidate recorded into the graph [`tune`] times.
const LAUNCHES: usize = 10;
/// Timed replays of that graph; the median counts.
const REPLAYS: usize = 3;

/// Tunes a launch on `on`: `run(candidate)` launches that candidate.
///
/// On a GPU, each is run once (loading its module, tuning what it tunes
/// itself), then ten launches of it are recorded into a CUDA graph, and
/// the median of three timed replays, over ten, is its time, as
/// [`choose`] says: the kernels back to back, without the
/// host's cost of launching them, which is larger than the whole run of a
/// kernel of a few microseconds and would otherwise decide the choice. On
/// the CPU, which times nothing a GPU would, the first candidate, untimed
/// and uncached: every candidate computes the same result there, so
/// callers put first the one that wastes least work on the CPU. Either
/// way, runs the chosen candidate last, so the outputs hold its result,
/// and returns it.
///
/// Panics when `candidates` is empty, as indexing an empty slice does.
pub fn tune<B: Backend, C: Copy + Display>(
    on: &B,
    key: &str,
    candidates: &[C],
    mut run: impl FnMut(C) -> Result<()>,
) -> Result<C> {
    timed(on, key, candidates, 0, |c, _| run(c))
}

/// Which launch of a candidate [`timed`] asks for.
#[derive(Clone, Copy)]
enum Launch {
    /// The untimed first run, before the timed ones are recorded.
    First,
    /// The `i`th recorded launch.
    Timed(usize),
    /// The chosen candidate's last run, on the caller's operands.
    Chosen,
}

/// [`tune`] for a launch that reads an operand no kernel before it leaves
/// in L2, as a decode step reads its weights: the timed launches take
/// turns over spare tensors of the operand's shape (`spare()` makes one,
/// its contents unread by the timing), enough of them to overflow L2, so
/// that none finds its operand there. Timed hot, a tile that is fastest
/// from L2 wins where another streams from DRAM faster. `run(candidate,
/// None)` launches on the caller's operand, `Some(t)` on a spare. Spares
/// are made only when there is something to time, and freed after; where
/// they don't fit in memory, the candidates are timed hot. The choices
/// are cached apart from [`tune`]'s (`|cold` ends the key).
pub fn tune_cold<B: Backend, C: Copy + Display, T: Element>(
    on: &B,
    key: &str,
    candidates: &[C],
    (shape, spare): (&[usize], impl FnMut() -> Result<B::Tensor<T>>),
    mut run: impl FnMut(C, Option<&B::Tensor<T>>) -> Result<()>,
) -> Result<C> {
    let bytes = (shape.iter().product::<usize>() * std::mem::size_of::<T>()).max(1);
    let l2 = on.stream().map_or(0, |s| s.device().l2_bytes());
    // Three times L2 in all: a spare is evicted long before its next turn.
    let count = (3 * l2).div_ceil(bytes).clamp(2, 256);
    let mut spares: Vec<B::Tensor<T>> = Vec::new();
    let mut spare = spare;
    timed(
        on,
        &format!("{key}|cold"),
        candidates,
        count,
        |c, launch| match launch {
            Launch::Timed(i) if !spares.is_empty() => run(c, Some(&spares[i % spares.len()])),
            Launch::First if spares.is_empty() => {
                // Made before the first recording; none if they don't all fit.
                spares = (0..count).map(|_| spare()).collect::<Result<_>>().unwrap_or_default();
                run(c, None)
            }
            _ => run(c, None),
        },
    )
}

/// [`tune`]'s timing: `run(candidate, launch)` for each of a candidate's
/// launches, at least `launches` of them recorded and timed.
fn timed<B: Backend, C: Copy + Display>(
    on: &B,
    key: &str,
    candidates: &[C],
    launches: usize,
    mut run: impl FnMut(C, Launch) -> Result<()>,
) -> Result<C> {
    let Some(stream) = on.stream() else {
        let first = *candidates.first().expect("autotuning needs at least one candidate");
        run(first, Launch::Chosen)?;
        return Ok(first);
    };
    let device = stream.device();
    let key = format!("{key}|{}|{}", device.name(), device.target().name());
    let launches = launches.max(LAUNCHES);
    let choice = choose(&key, candidates, |c| {
        run(c, Launch::First)?;
        let graph = stream.capture(|| (0..launches).try_for_each(|i| run(c, Launch::Timed(i))))?;
        stream.replay(&graph)?;
        let mut times = Vec::with_capacity(REPLAYS);
        for _ in 0..REPLAYS {
            let start = stream.record()?;
            stream.replay(&graph)?;
            let end = stream.record()?;
            times.push(start.elapsed_ms(&end)? as f64 / launches as f64);
        }
        times.sort_by(f64::total_cmp);
        Ok(times[REPLAYS / 2])
    })?;
    run(choice, Launch::Chosen)?;
    Ok(choice)
}

/// Rounds a problem size up to its class, four to an octave (1024, 1280,
/// 1536, 1792, 2048, 2560, ..; exact up to 8): sizes in one class share a
/// choice. Whole octaves were too coarse: GPT-2's 2304- and 3072-column
/// products then shared one, and the 3072 one, run with the tile chosen
/// for 2304, was 13-16% slower (tf32, H100).
pub fn size_class(n: usize) -> usize {
    let step = (n.max(1).next_power_of_two() / 8).max(1);
    n.max(1).div_ceil(step) * step
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_fastest_then_reuses_the_choice_without_measuring() {
        let dir = std::env::temp_dir().join(format!("tile-autotune-{}", std::process::id()));
        let file = dir.join("autotune.tsv");
        let cache = Mutex::new(HashMap::new());
        let times = [("a", 3.0), ("b", 1.0), ("c", 2.0)];
        let mut calls = 0;
        let pick = choose_in(&cache, Some(&file), "k|test|gpu", &["a", "b", "c"], |c| {
            calls += 1;
            Ok(times.iter().find(|t| t.0 == c).unwrap().1)
        })
        .unwrap();
        assert_eq!((pick, calls), ("b", 3));
        let again = choose_in(&cache, Some(&file), "k|test|gpu", &["a", "b", "c"], |_| {
            panic!("cached")
        })
        .unwrap();
        assert_eq!(again, "b");
        // And on disk, where the next process starts from.
        let reloaded = Mutex::new(parse(&std::fs::read_to_string(&file).unwrap()));
        let later = choose_in(&reloaded, None, "k|test|gpu", &["a", "b", "c"], |_| panic!("on disk")).unwrap();
        assert_eq!(later, "b");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_lone_candidate_is_used_unmeasured_and_not_cached() {
        let cache = Mutex::new(HashMap::new());
        let pick = choose_in(&cache, None, "k|lone|gpu", &["only"], |_| panic!("measured")).unwrap();
        assert_eq!(pick, "only");
        assert!(cache.lock().unwrap().is_empty());
    }

    #[test]
    fn failing_candidates_are_skipped() {
        let cache = Mutex::new(HashMap::new());
        let pick = choose_in(&cache, None, "k|fail|gpu", &["bad", "good"], |c| {
            if c == "bad" {
                Err(crate::Error::Shape("no".into()))
            } else {
                Ok(1.0)
            }
        })
        .unwrap();
        assert_eq!(pick, "good");
    }

    #[test]
    fn on_the_cpu_the_first_candidate_runs_untimed() {
        let mut runs = Vec::new();
        let pick = tune(&crate::Cpu, "k|cpu", &["first", "second"], |c| {
            runs.push(c);
            Ok(())
        })
        .unwrap();
        assert_eq!((pick, runs), ("first", vec!["first"]));
        let failing = tune(&crate::Cpu, "k|cpu", &[1, 2], |_| Err(crate::Error::Shape("no".into())));
        assert_eq!(failing, Err(crate::Error::Shape("no".into())));
    }

    #[test]
    fn on_the_cpu_cold_tuning_makes_no_spares_and_runs_the_operands() {
        let mut runs = Vec::new();
        let mut spares = 0;
        let spare = || {
            spares += 1;
            Ok(crate::HostTensor::<f32>::zeros(&[4, 4]))
        };
        let pick = tune_cold(&crate::Cpu, "k|cpu", &["first", "second"], (&[4, 4], spare), |c, w| {
            runs.push((c, w.is_some()));
            Ok(())
        })
        .unwrap();
        assert_eq!((pick, runs, spares), ("first", vec![("first", false)], 0));
    }

    #[test]
    fn size_classes_are_four_to_an_octave() {
        let classes = [0, 5, 768, 1024, 1025, 2304, 3072, 50257].map(size_class);
        assert_eq!(classes, [1, 5, 768, 1024, 1280, 2560, 3072, 57344]);
    }
}
