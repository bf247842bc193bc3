//! `flash_kernel!` at compile time (trybuild): a valid invocation builds and runs, and every
//! kind of bad input gives the error pinned in `tests/ui/*.stderr`, pointing at the
//! offending token. Re-pin after a deliberate message change with
//! `TRYBUILD=overwrite cargo test --test macro_ui`.

#[test]
fn flash_kernel_ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass_*.rs");
    t.compile_fail("tests/ui/fail_*.rs");
}
