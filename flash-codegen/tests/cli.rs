//! CLI layer, tests: the flash-codegen command run as users run it: list, emit one, emit
//! --all with its manifest and schema, a reader that stops early, every wrong flag
//! combination, and a bad name that gets a suggestion and a non-zero exit. (What --all
//! leaves behind on a failure: cli_out_dir.rs.)

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::{BIN, TempDir, cli, stderr, stdout};
use flash_codegen::KernelSpec;
use flash_codegen::manifest::{self, Manifest, sm90a};

#[test]
fn list_prints_every_kernel_name() {
    let o = cli(&["list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut want: Vec<String> = KernelSpec::all().iter().map(KernelSpec::name).collect();
    want.extend(sm90a::shipping().iter().map(|v| v.name()));
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

    // An sm_90a kernel by its name.
    for var in sm90a::shipping() {
        let o = cli(&["emit", &var.name()]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(stdout(&o), sm90a::ptx(var));
    }
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
    let vars = sm90a::shipping();
    assert_eq!(m.sm90a.kernels.len(), vars.len());
    for (k, v) in m.sm90a.kernels.iter().zip(&vars) {
        assert_eq!(*k, sm90a::kernel(v));
        let ptx = std::fs::read_to_string(out.join(&k.file)).expect("the kernel's file exists");
        assert_eq!(ptx, sm90a::ptx(*v));
        assert!(ptx.contains(&format!(".visible .entry {}(", k.name)));
        assert!(ptx.contains(&format!(".target {}", k.target)));
        assert!(ptx.contains(&format!(".version {}", k.ptx_version)));
    }
    for (k, s) in m.kernels.iter().zip(&specs) {
        assert_eq!(k.name, s.name());
        assert_eq!(k.spec, *s);
        let ptx = std::fs::read_to_string(out.join(&k.file)).expect("the kernel's file exists");
        assert_eq!(ptx, flash_codegen::generate(s));
        assert!(ptx.contains(&format!(".visible .entry {}(", k.name)));
        assert!(ptx.contains(&format!(".target {}", k.target)));
        assert!(ptx.contains(&format!(".version {}", k.ptx_version)));
    }
    assert_eq!(
        std::fs::read_to_string(out.join("manifest.schema.json")).unwrap(),
        manifest::SCHEMA
    );
    let files = std::fs::read_dir(&out).unwrap().count();
    assert_eq!(
        files,
        specs.len() + vars.len() + 2,
        "only the kernels, manifest.json and manifest.schema.json"
    );
    assert_eq!(
        text,
        manifest::manifest_with_sm90a(&specs, &vars, &flash_codegen::Tuning::NONE).to_json()
    );
    let nested = std::fs::read_dir(dir.0.join("nested")).unwrap().count();
    assert_eq!(nested, 1, "no temporary directory left next to the output");
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

/// `--arch` writes one architecture's kernels; the manifest lists only them (the other
/// list empty).
#[test]
fn emit_all_for_one_arch() {
    let dir = TempDir::new("arch");
    for (arch, sm80, sm90) in [("sm90a", 0, 32), ("sm80", KernelSpec::all().len(), 0)] {
        let out = dir.0.join(arch);
        let o = cli(&[
            "emit",
            "--all",
            "--arch",
            arch,
            "--out-dir",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let text = std::fs::read_to_string(out.join("manifest.json")).unwrap();
        let m = Manifest::from_json(&text).unwrap();
        assert_eq!(
            (m.kernels.len(), m.sm90a.kernels.len()),
            (sm80, sm90),
            "{arch}"
        );
        let files = std::fs::read_dir(&out).unwrap().count();
        assert_eq!(files, sm80 + sm90 + 2, "{arch}");
        for k in &m.sm90a.kernels {
            assert!(out.join(&k.file).is_file(), "{}", k.file);
        }
    }
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

/// Each way to combine emit's flags other than its two forms is a usage error (exit 2)
/// that names both forms, and writes nothing.
#[test]
fn wrong_flag_combinations_name_both_forms() {
    let dir = TempDir::new("flags");
    let (x, f) = (dir.arg("x"), dir.arg("f.ptx"));
    let name = "fa2_fwd_d64_f16_sm80";
    for (args, why) in [
        (
            vec!["emit", name, "--out-dir", &x],
            "--out-dir is only for --all",
        ),
        (
            vec!["emit", name, "-o", &f, "--out-dir", &x],
            "--out-dir is only for --all",
        ),
        (vec!["emit", "--all"], "--all needs --out-dir DIR"),
        (vec!["emit", "--all", "-o", &f], "-o FILE writes one kernel"),
        (
            vec!["emit", "--all", "--out-dir", &x, "-o", &f],
            "-o FILE writes one kernel",
        ),
        (
            vec!["emit", name, "--all", "--out-dir", &x],
            "a kernel NAME and --all exclude each other",
        ),
        (vec!["emit", name, "--all"], "a kernel NAME and --all"),
        (
            vec!["emit", "--out-dir", &x],
            "--out-dir DIR is only for --all",
        ),
        (vec!["emit", "-o", &f], "-o FILE needs the kernel NAME"),
        (
            vec!["emit", name, "--arch", "sm90a"],
            "--arch is only for --all",
        ),
        (
            vec!["emit"],
            "emit needs a kernel NAME or --all --out-dir DIR",
        ),
    ] {
        let o = cli(&args);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.starts_with(&format!("error: {why}")), "{args:?}: {e}");
        for form in ["emit NAME [-o FILE]", "emit --all --out-dir DIR", "Usage:"] {
            assert!(e.contains(form), "{args:?} does not name `{form}`: {e}");
        }
        assert!(stdout(&o).is_empty(), "{args:?} printed PTX");
        assert!(common::tree(&dir.0).is_empty(), "{args:?} wrote a file");
    }
}

#[test]
fn bad_options_fail_with_a_message() {
    for args in [
        &["emit", "fa2_fwd_d64_f16_sm80", "--frobnicate"][..],
        &[
            "emit",
            "fa2_fwd_d64_f16_sm80",
            "--tile",
            "fwd:64=64,64,4,2,2",
        ],
        &["frobnicate"],
    ] {
        let o = cli(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
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

/// `emit NAME | head -1`: the reader closes the pipe long before the PTX (hundreds of KiB,
/// more than a pipe holds) is written; the command ends quietly, with success.
#[test]
fn a_reader_that_stops_early_is_no_error() {
    for args in [&["emit", "fa2_bwd_d256_f16_sm80"][..], &["list"]] {
        let mut child = Command::new(BIN)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        drop(out);
        let o = child.wait_with_output().unwrap();
        let e = stderr(&o);
        assert!(!line.is_empty(), "{args:?}: no first line");
        assert_ne!(o.status.code(), Some(101), "{args:?} panicked: {e}");
        assert!(!e.contains("panicked"), "{args:?}: {e}");
        assert!(o.status.success(), "{args:?}: {:?} {e}", o.status);
        assert!(e.is_empty(), "{args:?}: {e}");
    }
    let o = cli(&["emit", "fa2_bwd_d256_f16_sm80"]);
    assert!(o.status.success() && stdout(&o).starts_with("// Generated by flash-ptx"));
}

/// The top-level help describes the command (its subcommands, what --all writes, --tile),
/// not the library, with examples.
#[test]
fn help_describes_the_command() {
    let o = cli(&["--help"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let help = stdout(&o);
    for want in [
        "list",
        "emit NAME [-o FILE]",
        "emit --all --out-dir DIR",
        "manifest.json",
        "manifest.schema.json",
        "--tile",
        "Examples:",
    ] {
        assert!(help.contains(want), "--help lacks `{want}`:\n{help}");
    }
    assert!(
        !help.contains("typed PTX IR"),
        "the library's description:\n{help}"
    );
    let short = stdout(&cli(&["-h"]));
    assert!(
        short.contains("emit") && short.contains("manifest.json"),
        "{short}"
    );
    let emit = stdout(&cli(&["emit", "--help"]));
    assert!(emit.contains("all or nothing") || emit.contains("leaves DIR as it was"));
}
