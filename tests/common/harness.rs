//! The harness of the test binaries with tests that need a GPU or `ptxas`
//! (`harness = false`; also gpt-model's `tests/model.rs`). Each test says
//! once what it needs; where the machine lacks it, the test is reported
//! `ignored`, with the reason on its line and in a note after the run,
//! and counted as ignored, not passed. With `TILE_REQUIRE_GPU=1` a
//! missing GPU fails the GPU tests instead.
//!
//! It is libtest-mimic: libtest's output and options (a name filter,
//! `--exact`, `--skip`, `--test-threads`, `--list`, `--include-ignored`),
//! but what tests print is not captured (see [`shows_output`]).

use libtest_mimic::{Arguments, Completion, Trial};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use tile::{Device, Error};

/// Why a test cannot run on this machine.
pub struct Missing {
    /// Short, on the test's line: `ignored (no GPU: no CUDA driver)`.
    pub reason: String,
    /// Said once after the run, for all the tests ignored for `reason`.
    pub detail: String,
}

/// One test of a binary.
pub struct Test(Trial);

/// The tests ignored so far: per reason, how many and the detail.
static IGNORED: Mutex<BTreeMap<String, (usize, String)>> = Mutex::new(BTreeMap::new());

impl Test {
    /// A test that runs anywhere.
    pub fn new(name: impl Into<String>, f: impl FnOnce() + Send + 'static) -> Test {
        Test(Trial::test(name, move || {
            f();
            Ok(())
        }))
    }

    /// A test of something a machine may lack: on the test's thread,
    /// `need` gets it for `f`, or says why it is missing (the test is then
    /// ignored), or panics where a missing one is a failure.
    pub fn needing<T>(
        name: impl Into<String>,
        need: impl FnOnce() -> Result<T, Missing> + Send + 'static,
        f: impl FnOnce(T) + Send + 'static,
    ) -> Test {
        Test(Trial::ignorable_test(name, move || match need() {
            Ok(x) => {
                f(x);
                Ok(Completion::Completed)
            }
            Err(Missing { reason, detail }) => {
                let mut ignored = IGNORED.lock().unwrap_or_else(|e| e.into_inner());
                ignored.entry(reason.clone()).or_insert((0, detail)).0 += 1;
                Ok(Completion::ignored_with(reason))
            }
        }))
    }

    /// A test on the GPU: `f` gets device 0, opened on the test's thread
    /// ([`tile::testing::gpu_for_test`]). Ignored without a GPU, failed
    /// under `TILE_REQUIRE_GPU=1`.
    pub fn gpu(name: impl Into<String>, f: impl FnOnce(Arc<Device>) + Send + 'static) -> Test {
        let name = name.into();
        let test = name.clone();
        Test::needing(name, move || gpu_for(&test), f)
    }

    /// A test of the CPU backend that checks the GPU against it too: `name`
    /// runs `f(None)`, `gpu::name` runs `f(Some(device))` as
    /// [`Test::gpu`] does, so that a missing GPU shows as an ignored test.
    pub fn cpu_then_gpu(name: &str, f: fn(Option<Arc<Device>>)) -> [Test; 2] {
        [
            Test::new(name, move || f(None)),
            Test::gpu(format!("gpu::{name}"), move |d| f(Some(d))),
        ]
    }
}

/// The GPU for `test`, or why there is none (a failure where
/// `TILE_REQUIRE_GPU=1`).
pub fn gpu_for(test: &str) -> Result<Arc<Device>, Missing> {
    tile::testing::gpu_for_test(test).map_err(|e| Missing {
        reason: match e {
            Error::NoDriver => "no GPU: no CUDA driver".to_string(),
            Error::NoDevice => "no GPU: no CUDA device".to_string(),
            ref other => format!("no GPU: {other}"),
        },
        detail: format!("{e}. Set TILE_REQUIRE_GPU=1 to make that a failure."),
    })
}

/// Whether the command line asked to see what passing tests print
/// (`--nocapture`, `--show-output`): this harness does not capture it, so
/// a test that prints much prints it only then.
pub fn shows_output() -> bool {
    let args = Arguments::from_args();
    args.nocapture || args.show_output
}

/// Runs the tests libtest's way (the command line's filter and options;
/// in order of their names, as libtest runs them one at a time), then says
/// why the ignored ones were ignored.
pub fn run(tests: impl IntoIterator<Item = Test>) -> ExitCode {
    let args = Arguments::from_args();
    let mut trials: Vec<Trial> = tests.into_iter().map(|t| t.0).collect();
    trials.sort_by(|a, b| a.name().cmp(b.name()));
    let conclusion = libtest_mimic::run(&args, trials);
    let ignored = IGNORED.lock().unwrap_or_else(|e| e.into_inner());
    for (reason, (n, detail)) in ignored.iter() {
        let tests = if *n == 1 { "test" } else { "tests" };
        eprintln!("{n} {tests} ignored ({reason}): {detail}");
    }
    conclusion.exit_code()
}
