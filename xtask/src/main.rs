//! xtask: project chores that are not part of any crate, run as `cargo xtask <task>`.
//!
//! `gpu-bundle`: build the GPU tests and GPU examples in release mode on this (CPU) machine
//! and gather them, with a `run.sh`, the scripts and the table's PTX + manifest
//! (`ptx-out/`), into `target/gpu-bundle/`, to be copied to a GPU machine that has the
//! driver but no Rust toolchain (cudarc loads libcuda at run time).

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

const USAGE: &str = "usage: cargo xtask <task>

tasks:
  gpu-bundle   build the GPU tests (tests/gpu_*.rs) and GPU examples in release mode and
               collect them with run.sh, scripts/ and every kernel's PTX (ptx-out/)
               into target/gpu-bundle/";

/// Bundles larger than this are awkward to ship to the GPU machine.
const SIZE_BUDGET: u64 = 64 * 1024 * 1024;

const RUN_SH: &str = r#"#!/usr/bin/env bash
# Runs every GPU test binary of this bundle, one test at a time, output not captured.
# Logs go to $OUT if set, else ./logs. Extra arguments go to every test binary
# (e.g. a test name filter). Benchmarks are in examples/: run them by hand.
set -uo pipefail
cd "$(dirname "$0")"
LOGS="${OUT:-$PWD/logs}"
mkdir -p "$LOGS"
shopt -s nullglob
status=0
: > "$LOGS/summary.txt"
for t in tests/*; do
  name="$(basename "$t")"
  echo "=== $name"
  if "./$t" --test-threads=1 --nocapture "$@" 2>&1 | tee "$LOGS/$name.log"; then
    echo "$name: ok" | tee -a "$LOGS/summary.txt"
  else
    echo "$name: FAILED" | tee -a "$LOGS/summary.txt"
    status=1
  fi
done
echo "=== summary (logs in $LOGS)"
cat "$LOGS/summary.txt"
exit $status
"#;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("gpu-bundle") if args.len() == 1 => gpu_bundle(),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace root")
        .to_path_buf()
}

/// One built executable: its target name and where cargo put it.
struct Artifact {
    name: String,
    path: PathBuf,
}

/// Runs cargo with `--message-format=json` and returns the executables whose JSON
/// `target` passes `keep`.
fn cargo_artifacts(
    args: &[&str],
    keep: impl Fn(&serde_json::Value) -> bool,
) -> Result<Vec<Artifact>, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    eprintln!("xtask: cargo {}", args.join(" "));
    let mut child = Command::new(&cargo)
        .args(args)
        .arg("--message-format=json")
        .current_dir(workspace_root())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {cargo}: {e}"))?;
    let mut out = Vec::new();
    let stdout = child.stdout.take().expect("piped stdout");
    for line in BufReader::new(stdout).lines() {
        let line = line.map_err(|e| e.to_string())?;
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" || !keep(&msg["target"]) {
            continue;
        }
        if let (Some(exe), Some(name)) =
            (msg["executable"].as_str(), msg["target"]["name"].as_str())
        {
            out.push(Artifact {
                name: name.to_string(),
                path: PathBuf::from(exe),
            });
        }
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    if !status.success() {
        return Err(format!("cargo {} failed ({status})", args.join(" ")));
    }
    Ok(out)
}

fn has_kind(target: &serde_json::Value, kind: &str) -> bool {
    target["kind"]
        .as_array()
        .is_some_and(|k| k.iter().any(|x| x == kind))
}

fn requires_gpu(target: &serde_json::Value) -> bool {
    target["required-features"]
        .as_array()
        .is_some_and(|f| f.iter().any(|x| x == "gpu"))
}

fn copy_into(dir: &Path, name: &str, from: &Path) -> Result<u64, String> {
    fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let to = dir.join(name);
    fs::copy(from, &to)
        .map_err(|e| format!("cannot copy {} to {}: {e}", from.display(), to.display()))
}

fn gpu_bundle() -> Result<(), String> {
    let root = workspace_root();
    let tests = cargo_artifacts(
        &["test", "--release", "--features", "gpu", "--no-run"],
        |t| has_kind(t, "test") && t["name"].as_str().is_some_and(|n| n.starts_with("gpu_")),
    )?;
    let examples = cargo_artifacts(
        &["build", "--release", "--features", "gpu", "--examples"],
        |t| has_kind(t, "example") && requires_gpu(t),
    )?;

    let bundle = root.join("target/gpu-bundle");
    if bundle.exists() {
        fs::remove_dir_all(&bundle)
            .map_err(|e| format!("cannot clear {}: {e}", bundle.display()))?;
    }
    fs::create_dir_all(&bundle).map_err(|e| e.to_string())?;
    let mut total = 0;
    for t in &tests {
        total += copy_into(&bundle.join("tests"), &t.name, &t.path)?;
        eprintln!("xtask: test     {}", t.name);
    }
    for e in &examples {
        total += copy_into(&bundle.join("examples"), &e.name, &e.path)?;
        eprintln!("xtask: example  {}", e.name);
    }
    if let Ok(entries) = fs::read_dir(root.join("scripts")) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|x| x == "py" || x == "sh") {
                let name = entry.file_name().to_string_lossy().into_owned();
                total += copy_into(&bundle.join("scripts"), &name, &path)?;
            }
        }
    }
    let run = bundle.join("run.sh");
    fs::write(&run, RUN_SH).map_err(|e| e.to_string())?;
    set_executable(&run)?;
    let ptx = bundle.join("ptx-out");
    emit_ptx(&root, &ptx)?;
    for entry in fs::read_dir(&ptx).map_err(|e| e.to_string())?.flatten() {
        total += entry.metadata().map_or(0, |m| m.len());
    }

    if tests.is_empty() {
        eprintln!("xtask: warning: no tests/gpu_*.rs test binaries were built");
    }
    let mib = total as f64 / (1024.0 * 1024.0);
    eprintln!(
        "xtask: {} with {} test(s), {} example(s), {mib:.1} MiB",
        bundle.display(),
        tests.len(),
        examples.len()
    );
    if total > SIZE_BUDGET {
        eprintln!("xtask: warning: the bundle is over 64 MiB");
    }
    eprintln!(
        "xtask: on the GPU machine: bash scripts/check_all.sh OUT (tests, checks, sanitizers), \
         bash scripts/bench_all.sh OUT (benchmark)"
    );
    Ok(())
}

/// Every kernel of the table plus `manifest.json`, for the manifest-driven scripts.
fn emit_ptx(root: &Path, out: &Path) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(root)
        .args([
            "run",
            "--quiet",
            "--release",
            "-p",
            "flash-codegen",
            "--",
            "emit",
            "--all",
        ])
        .arg("--out-dir")
        .arg(out)
        .status()
        .map_err(|e| format!("cannot run flash-codegen: {e}"))?;
    if !status.success() {
        return Err(format!("flash-codegen emit failed ({status})"));
    }
    Ok(())
}

#[cfg(unix)]
fn set_executable(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())
}

#[cfg(not(unix))]
fn set_executable(_: &Path) -> Result<(), String> {
    Ok(())
}
