//! CLI layer: the flash-codegen command. Lists kernel variants and writes their PTX (plus
//! a `manifest.json` describing each kernel's ABI, and its JSON Schema) for users outside
//! Rust.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, Subcommand};
use flash_codegen::{Tuning, manifest};

// Beside the crate root a module would be a binary of its own (src/bin/*.rs).
#[path = "flash-codegen/kernel.rs"]
mod kernel;
#[path = "flash-codegen/out_dir.rs"]
mod out_dir;

use kernel::{ArchFilter, Kernel};

const ABOUT: &str = "Writes flash-ptx's FlashAttention-2 kernels (and its sm_90a Hopper forwards) as PTX \
(generated in pure Rust, no CUDA toolkit), with a manifest.json for launching them from CuPy, \
PyTorch or C++";

const LONG_ABOUT: &str = "\
Writes flash-ptx's FlashAttention-2 kernels as PTX, generated in pure Rust (no CUDA toolkit),
for use outside Rust: CuPy, PyTorch, C++ with the CUDA driver API.

  list                      print every kernel name, one per line
  emit NAME [-o FILE]       write one kernel's PTX to stdout, or to FILE
  emit --all --out-dir DIR  write every kernel as DIR/NAME.ptx, plus DIR/manifest.json (each
                            kernel's parameters, launch geometry and tiles; the sm_90a
                            kernels' tensor maps) and DIR/manifest.schema.json (the
                            manifest's JSON Schema); --arch sm80 or --arch sm90a writes
                            one architecture's kernels only

--all writes DIR all or nothing: a failure leaves DIR as it was (see `emit --help`).

emit --tile PASS:D=BM,BN,WARPS,STAGES,SWEEPS[,resident|,exchange][,late] (repeatable)
builds that pass and head dim on other tiles than the table's, for tuning: the kernels keep
their names, and manifest.json records the tiles they were built with.";

const EXAMPLES: &str = "\
Examples:
  flash-codegen list
  flash-codegen emit fa2_fwd_d128_bf16_causal_sm80 -o fwd.ptx
  flash-codegen emit fa2_fwd_d128_bf16_causal_sm80 | head
  flash-codegen emit --all --out-dir ptx-out
  flash-codegen emit --all --arch sm90a --out-dir ptx-sm90a
  flash-codegen emit --all --out-dir ptx-tuned --tile fwd:128=128,64,4,2,1,resident";

const EMIT_USAGE: &str = "\
flash-codegen emit NAME [-o FILE] [--tile ROW]...
       flash-codegen emit --all --out-dir DIR [--arch ARCH] [--tile ROW]...";

const EMIT_LONG_ABOUT: &str = "\
Write the PTX of one kernel (to stdout or -o FILE), or of every kernel plus manifest.json and
manifest.schema.json (--all --out-dir DIR).

--all writes every file into a temporary directory first and puts them in place only once all
are written, so a failure leaves DIR as it was. A missing DIR is created whole (renamed from
DIR.tmp-<pid> next to it); in an existing DIR each file replaces its namesake, manifest.json
last, and other files are left alone.";

/// The flash-codegen command line.
#[derive(Parser, Debug)]
#[command(name = "flash-codegen", version, about = ABOUT, long_about = LONG_ABOUT, after_help = EXAMPLES)]
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
    #[command(override_usage = EMIT_USAGE, long_about = EMIT_LONG_ABOUT, after_help = EXAMPLES)]
    Emit {
        /// The kernel's name, e.g. fa2_fwd_d128_bf16_causal_sm80 (see `flash-codegen list`).
        #[arg(value_parser = kernel::parse)]
        name: Option<Kernel>,
        /// Write the one kernel's PTX to FILE instead of stdout.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Emit every kernel variant into --out-dir, with manifest.json and
        /// manifest.schema.json.
        #[arg(long)]
        all: bool,
        /// The directory --all writes to (created if missing).
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
        /// With --all: only the kernels of this architecture (the other's manifest list
        /// stays empty).
        #[arg(long, value_name = "ARCH")]
        arch: Option<ArchFilter>,
        /// Tuning: build (pass, head dim) with other tiles than the table's, e.g.
        /// `fwd:256=128,32,8,2,1`, `bwd:64=64,64,4,2,1,resident` or
        /// `bwd:128=64,128,8,2,1,exchange,late` (repeatable). Replaces standard rows only.
        #[arg(long = "tile", value_name = "PASS:D=BM,BN,WARPS,STAGES,SWEEPS[,resident|,exchange][,late]",
              value_parser = flash_codegen::spec::parse_override)]
        tiles: Vec<(flash_codegen::Pass, u32, flash_codegen::TileConfig)>,
    },
}

/// What `emit` was asked to write: the one valid reading of its flags.
enum Emit {
    /// One kernel, to stdout or a file.
    One {
        kernel: Kernel,
        output: Option<PathBuf>,
    },
    /// Every kernel (of `arch`, if given), the manifest and its schema, into a directory.
    All {
        dir: PathBuf,
        arch: Option<ArchFilter>,
    },
}

/// The two forms of `emit`, for the messages of the flag combinations that are neither.
const FORMS: &str = "
  one kernel, to stdout or FILE:      flash-codegen emit NAME [-o FILE]
  every kernel, with manifest.json:   flash-codegen emit --all --out-dir DIR";

/// Reads `emit`'s flags as one of its two forms, or says which combination is wrong.
fn emit_form(
    name: Option<Kernel>,
    output: Option<PathBuf>,
    all: bool,
    (out_dir, arch): (Option<PathBuf>, Option<ArchFilter>),
) -> Result<Emit, (ErrorKind, String)> {
    use ErrorKind::{ArgumentConflict as Conflict, MissingRequiredArgument as Missing};
    let e = |kind, what: &str| Err((kind, format!("{what}{FORMS}")));
    if arch.is_some() && !all {
        return e(Conflict, "--arch is only for --all");
    }
    match (name, output, all, out_dir) {
        (Some(kernel), output, false, None) => Ok(Emit::One { kernel, output }),
        (None, None, true, Some(dir)) => Ok(Emit::All { dir, arch }),
        (Some(_), _, true, _) => e(Conflict, "a kernel NAME and --all exclude each other"),
        (Some(_), _, false, Some(_)) => e(
            Conflict,
            "--out-dir is only for --all; to write one kernel to a file, use -o FILE",
        ),
        (None, Some(_), true, _) => e(
            Conflict,
            "-o FILE writes one kernel and cannot be used with --all; --all writes into --out-dir DIR",
        ),
        (None, None, true, None) => e(
            Missing,
            "--all needs --out-dir DIR, the directory to write every kernel and manifest.json into",
        ),
        (None, Some(_), false, _) => e(Missing, "-o FILE needs the kernel NAME to write"),
        (None, None, false, Some(_)) => e(Missing, "--out-dir DIR is only for --all"),
        (None, None, false, None) => e(Missing, "emit needs a kernel NAME or --all --out-dir DIR"),
    }
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Writes `text` to stdout. A reader that stops early (`flash-codegen emit NAME | head`)
/// closes the pipe: that ends the output quietly, it is not an error.
fn print_stdout(text: &str) -> Result<(), String> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        r => r.map_err(|e| format!("cannot write to stdout: {e}")),
    }
}

/// A line on stderr; a closed stderr is ignored (`eprintln!` would panic).
fn note(line: &str) {
    let _ = writeln!(io::stderr().lock(), "{line}");
}

/// The files of `emit --all` (the kernels of `arch`, or all), in the order they take
/// their place: the kernels, the schema, then manifest.json (so that a reader who sees the
/// new manifest sees the rest).
fn all_files(arch: Option<ArchFilter>, tuning: &Tuning) -> Result<Vec<out_dir::OutFile>, String> {
    let (specs, variants) = kernel::selected(arch);
    let kernels: Vec<Kernel> = (specs.iter().map(|s| Kernel::Sm80(*s)))
        .chain(variants.iter().map(|v| Kernel::Sm90a(*v)))
        .collect();
    // Kernels are independent: generate them on all cores, keep them in order.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = kernels.len().div_ceil(threads).max(1);
    let ptx: Vec<String> = std::thread::scope(|s| -> Result<Vec<String>, String> {
        let handles: Vec<_> = kernels
            .chunks(chunk)
            .map(|part| s.spawn(|| part.iter().map(|k| k.ptx(tuning)).collect::<Vec<_>>()))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(panic_message))
            .collect::<Result<Vec<_>, _>>()
            .map(|parts| parts.into_iter().flatten().collect())
    })?;
    let mut files: Vec<out_dir::OutFile> = kernels.iter().map(Kernel::file_name).zip(ptx).collect();
    files.push((
        manifest::SCHEMA_FILE.to_string(),
        manifest::SCHEMA.to_string(),
    ));
    files.push((
        manifest::MANIFEST_FILE.to_string(),
        manifest::manifest_with_sm90a(&specs, &variants, tuning).to_json(),
    ));
    Ok(files)
}

fn emit_all(dir: &Path, arch: Option<ArchFilter>, tuning: &Tuning) -> Result<(), String> {
    let (specs, variants) = kernel::selected(arch);
    let names = (specs.iter().map(manifest::file_name))
        .chain(variants.iter().map(manifest::sm90a::file_name))
        .collect::<Vec<String>>();
    let fixed = [manifest::SCHEMA_FILE, manifest::MANIFEST_FILE];
    // Fail before the generation's seconds where the directory cannot take the files.
    out_dir::precheck(dir, names.iter().map(String::as_str).chain(fixed))?;
    let files = all_files(arch, tuning)?;
    out_dir::write_all(dir, &files)?;
    note(&format!(
        "wrote {} kernels, {} and {} to {}",
        names.len(),
        manifest::MANIFEST_FILE,
        manifest::SCHEMA_FILE,
        dir.display()
    ));
    Ok(())
}

/// A generator panic (a tile override the kernel builders refuse) as an error message.
fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    let msg = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("unknown panic");
    format!(
        "generator bug (every tile row the rules accept must generate; please report it): {msg}"
    )
}

/// Why the command failed: a usage error (clap's format, exit 2) or a failure (exit 1).
enum Failure {
    Usage(ErrorKind, String),
    Error(String),
}

impl From<String> for Failure {
    fn from(e: String) -> Self {
        Failure::Error(e)
    }
}

fn run(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::List => {
            let names: Vec<String> = kernel::all().iter().map(Kernel::name).collect();
            Ok(print_stdout(&(names.join("\n") + "\n"))?)
        }
        Command::Emit {
            name,
            output,
            all,
            out_dir,
            arch,
            tiles,
        } => {
            let form = emit_form(name, output, all, (out_dir, arch))
                .map_err(|(k, m)| Failure::Usage(k, m))?;
            let tuning = Tuning::new(tiles)?;
            match form {
                Emit::All { dir, arch } => Ok(emit_all(&dir, arch, &tuning)?),
                Emit::One { kernel, output } => {
                    let ptx = kernel.ptx(&tuning);
                    Ok(match output {
                        Some(path) => write(&path, &ptx),
                        None => print_stdout(&ptx),
                    }?)
                }
            }
        }
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(kind, msg)) => {
            let mut cmd = Cli::command();
            cmd.build();
            let emit = cmd
                .find_subcommand_mut("emit")
                .expect("emit is a subcommand");
            emit.error(kind, msg).exit()
        }
        Err(Failure::Error(e)) => {
            note(&format!("error: {e}"));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_definition_is_valid() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
