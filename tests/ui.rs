//! Compile-fail tests, one per DSL rule: each kernel in `tests/ui/fail` breaks
//! one rule and its `.stderr` pins the error — the span it points at and the
//! message that teaches the rule. The kernels in `tests/ui/pass` are tricky
//! but valid; each `main` runs the CPU version and checks the result.
//!
//! Regenerate the expected output with `TRYBUILD=overwrite cargo test --test ui`
//! and review the diff.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
    t.pass("tests/ui/pass/*.rs");
}
