//! The flash-codegen command, run as users run it: list, emit one, emit --all with its
//! manifest, and a bad name that gets a suggestion and a non-zero exit.

use std::path::PathBuf;
use std::process::{Command, Output};

use flash_codegen::KernelSpec;
use flash_codegen::manifest::Manifest;

fn cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flash-codegen"))
        .args(args)
        .output()
        .expect("the flash-codegen binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf-8 stdout")
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("utf-8 stderr")
}

/// A fresh directory under the system temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let p =
            std::env::temp_dir().join(format!("flash-codegen-cli-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn list_prints_every_kernel_name() {
    let o = cli(&["list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let want: Vec<String> = KernelSpec::all().iter().map(KernelSpec::name).collect();
    let got: Vec<String> = stdout(&o).lines().map(str::to_string).collect();
    assert_eq!(got, want);
}

#[test]
fn emit_one_to_stdout_and_to_a_file() {
    let name = "fa2_fwd_d128_bf16_causal_sm80";
    let spec: KernelSpec = name.parse().unwrap();
    let o = cli(&["emit", name]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), flash_codegen::generate(&spec));

    let dir = TempDir::new("one");
    let file = dir.0.join("k.ptx");
    let o = cli(&["emit", name, "-o", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).is_empty());
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        flash_codegen::generate(&spec)
    );
}

#[test]
fn emit_all_writes_every_kernel_and_the_manifest() {
    let dir = TempDir::new("all");
    let out = dir.0.join("nested/ptx-out");
    let o = cli(&["emit", "--all", "--out-dir", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(out.join("manifest.json")).unwrap();
    let m: Manifest = serde_json::from_str(&text).expect("manifest.json parses");
    let specs = KernelSpec::all();
    assert_eq!(m.kernels.len(), specs.len());
    assert_eq!(m.generator.version, env!("CARGO_PKG_VERSION"));
    for (k, s) in m.kernels.iter().zip(&specs) {
        assert_eq!(k.name, s.name());
        assert_eq!(k.spec, *s);
        let ptx = std::fs::read_to_string(out.join(&k.file)).expect("the kernel's file exists");
        assert_eq!(ptx, flash_codegen::generate(s));
        assert!(ptx.contains(&format!(".visible .entry {}(", k.name)));
        assert!(ptx.contains(&format!(".target {}", k.target)));
        assert!(ptx.contains(&format!(".version {}", k.ptx_version)));
    }
    let files = std::fs::read_dir(&out).unwrap().count();
    assert_eq!(files, specs.len() + 1, "only the kernels and manifest.json");
    // Deterministic: a second run writes the same bytes.
    let again = dir.0.join("again");
    assert!(
        cli(&["emit", "--all", "--out-dir", again.to_str().unwrap()])
            .status
            .success()
    );
    assert_eq!(
        std::fs::read_to_string(again.join("manifest.json")).unwrap(),
        text
    );
}

#[test]
fn bad_name_suggests_the_closest_and_fails() {
    let o = cli(&["emit", "fa2_fwd_d128_bf16_casual_sm80"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("did you mean `fa2_fwd_d128_bf16_causal_sm80`?"),
        "{e}"
    );
    assert!(stdout(&o).is_empty());

    let o = cli(&["emit", "fa2_fwd_d100_f16_sm80"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("did you mean `fa2_fwd_d"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn bad_options_fail_with_a_message() {
    for args in [
        &["emit"][..],
        &["emit", "--all"],
        &["emit", "--out-dir", "x"],
        &["emit", "fa2_fwd_d64_f16_sm80", "--all", "--out-dir", "x"],
        &["emit", "fa2_fwd_d64_f16_sm80", "--frobnicate"],
        &["frobnicate"],
    ] {
        let o = cli(args);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(stderr(&o).contains("error"), "{args:?}: {}", stderr(&o));
    }
    let o = cli(&[
        "emit",
        "fa2_fwd_d64_f16_sm80",
        "-o",
        "/nonexistent-dir/x.ptx",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("cannot write /nonexistent-dir/x.ptx"));
}
