//! The flash-codegen command: lists kernel variants and writes their PTX (plus a
//! `manifest.json` describing each kernel's ABI) for users outside Rust.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use flash_codegen::{KernelSpec, Tuning, manifest};

/// FlashAttention-2 kernels as PTX, generated without a CUDA toolkit.
#[derive(Parser, Debug)]
#[command(name = "flash-codegen", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the name of every kernel variant, one per line.
    List,
    /// Write the PTX of one kernel (to stdout or -o FILE), or of every kernel plus
    /// manifest.json (--all --out-dir DIR).
    #[command(
        after_help = "Examples:\n  flash-codegen emit fa2_fwd_d128_bf16_causal_sm80 -o fwd.ptx\n  flash-codegen emit --all --out-dir ptx-out"
    )]
    Emit {
        /// The kernel's name, e.g. fa2_fwd_d128_bf16_causal_sm80 (see `flash-codegen list`).
        #[arg(value_parser = parse_spec, required_unless_present = "all", conflicts_with = "all")]
        name: Option<KernelSpec>,
        /// Write the PTX to FILE instead of stdout.
        #[arg(short, long, value_name = "FILE", conflicts_with = "all")]
        output: Option<PathBuf>,
        /// Emit every kernel variant into --out-dir, with manifest.json.
        #[arg(long, requires = "out_dir")]
        all: bool,
        /// The directory --all writes to (created if missing).
        #[arg(long, value_name = "DIR", requires = "all")]
        out_dir: Option<PathBuf>,
        /// Tuning: build (pass, head dim) with other tiles than the table's, e.g.
        /// `fwd:256=128,32,8,2,1`, `bwd:64=64,64,4,2,1,resident` or
        /// `bwd:128=64,128,8,2,1,exchange,late` (repeatable). Replaces standard rows only.
        #[arg(long = "tile", value_name = "PASS:D=BM,BN,WARPS,STAGES,SWEEPS[,resident|,exchange][,late]",
              value_parser = flash_codegen::spec::parse_override)]
        tiles: Vec<(flash_codegen::Pass, u32, flash_codegen::TileConfig)>,
    },
}

/// Parses a kernel name; on failure names the closest valid one.
fn parse_spec(s: &str) -> Result<KernelSpec, String> {
    s.parse::<KernelSpec>().map_err(|e| {
        let names: Vec<String> = KernelSpec::all().iter().map(KernelSpec::name).collect();
        let hint = match closest(s, &names) {
            Some(best) => format!("did you mean `{best}`? "),
            None => String::new(),
        };
        format!("{e}\n  {hint}(`flash-codegen list` prints every name)")
    })
}

/// The candidate with the smallest edit distance to `s` (the first one on ties), when it
/// is close enough to be a plausible typo (at most half its length away).
fn closest<'a>(s: &str, candidates: &'a [String]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| (levenshtein(s, c), c))
        .min_by_key(|(d, _)| *d)
        .filter(|(d, c)| *d <= c.len() / 2)
        .map(|(_, c)| c.as_str())
}

/// Edit distance (insertions, deletions, substitutions) between two strings.
fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = diag + usize::from(ca != *cb);
            diag = row[j + 1];
            row[j + 1] = sub.min(row[j] + 1).min(diag + 1);
        }
    }
    row[b.len()]
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn emit_all(dir: &Path, tuning: &Tuning) -> Result<(), String> {
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("cannot create directory {}: {e}", dir.display()))?;
    let specs = KernelSpec::all();
    // Kernels are independent: generate them on all cores, write them in order.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = specs.len().div_ceil(threads).max(1);
    let ptx: Vec<String> = std::thread::scope(|s| -> Result<Vec<String>, String> {
        let handles: Vec<_> = specs
            .chunks(chunk)
            .map(|part| {
                s.spawn(|| {
                    part.iter()
                        .map(|spec| flash_codegen::generate_tuned(spec, tuning))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(panic_message))
            .collect::<Result<Vec<_>, _>>()
            .map(|parts| parts.into_iter().flatten().collect())
    })?;
    for (spec, text) in specs.iter().zip(&ptx) {
        write(&dir.join(manifest::file_name(spec)), text)?;
    }
    write(
        &dir.join("manifest.json"),
        &manifest::manifest_tuned(&specs, tuning).to_json(),
    )?;
    eprintln!(
        "wrote {} kernels and manifest.json to {}",
        specs.len(),
        dir.display()
    );
    Ok(())
}

/// A generator panic (a tile override the kernel builders refuse) as an error message.
fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    let msg = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("unknown panic");
    format!("kernel generation failed (with --tile: tiles this kernel cannot use): {msg}")
}

fn run(cli: Cli) -> Result<(), String> {
    let tuning = match &cli.command {
        Command::Emit { tiles, .. } => Tuning::new(tiles.clone())?,
        Command::List => Tuning::NONE,
    };
    match cli.command {
        Command::List => {
            let names: Vec<String> = KernelSpec::all().iter().map(KernelSpec::name).collect();
            println!("{}", names.join("\n"));
            Ok(())
        }
        Command::Emit {
            all: true,
            out_dir: Some(dir),
            ..
        } => emit_all(&dir, &tuning),
        Command::Emit {
            name: Some(spec),
            output,
            ..
        } => {
            let ptx = flash_codegen::generate_tuned(&spec, &tuning);
            match output {
                Some(path) => write(&path, &ptx),
                None => {
                    print!("{ptx}");
                    Ok(())
                }
            }
        }
        // clap's `required_unless_present` / `requires` rule these out.
        Command::Emit { .. } => Err("emit needs a kernel NAME or --all --out-dir DIR".into()),
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance() {
        assert_eq!(levenshtein("", "abc"), 3);
        assert_eq!(levenshtein("kitten", "sitting"), 3);
        assert_eq!(levenshtein("same", "same"), 0);
    }

    #[test]
    fn suggests_the_closest_name() {
        let e = parse_spec("fa2_fwd_d128_bf16_casual_sm80").unwrap_err();
        assert!(
            e.contains("did you mean `fa2_fwd_d128_bf16_causal_sm80`?"),
            "{e}"
        );
        let far = parse_spec("x").unwrap_err();
        assert!(!far.contains("did you mean"), "{far}");
    }

    #[test]
    fn clap_definition_is_valid() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
