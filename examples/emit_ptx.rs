//! The code generator as a library (no GPU, no CUDA toolkit): build a [`KernelSpec`], read
//! its tile sizes, shared memory, launch geometry and parameter list, and write its PTX.
//!
//! ```sh
//! cargo run --release --example emit_ptx                                  # d128 bf16 causal forward, PTX to stdout
//! cargo run --release --example emit_ptx -- fa2_bwd_d64_f16_sm80 -o bwd.ptx
//! ```
//! The description goes to stderr, the PTX to stdout (by default; a reader that stops
//! early, `| head`, is no error) or to `-o FILE`, relative to where it runs: `.ptx` files
//! at the top of the checkout are git-ignored. Its tests write under the system temp dir
//! only. `cargo test` runs this file's tests (`test = true` in Cargo.toml), so the example
//! stays working in CI.

use std::error::Error;
use std::fmt::Write as _;
use std::io::Write as _;

use flash_ptx::codegen::spec::ParseSpecError;
use flash_ptx::codegen::{
    Arch, DType, KernelSpec, Mask, Pass, Tiling, Tuning, abi, generate, manifest,
};

/// The kernel of the default run, built field by field. Its name is
/// `fa2_fwd_d128_bf16_causal_sm80`, and `"fa2_fwd_d128_bf16_causal_sm80".parse()` gives
/// the same spec back.
const DEFAULT: KernelSpec = KernelSpec {
    pass: Pass::Fwd,
    head_dim: 128,
    dtype: DType::Bf16,
    mask: Mask::Causal,
    scores: flash_codegen::Scores::Plain,
    tiling: Tiling::Standard,
    arch: Arch::Sm80,
};

/// A human-readable description of `spec`: tiles, shared memory, launch and parameters.
fn describe(spec: &KernelSpec) -> String {
    let plan = spec.plan(&Tuning::NONE); // the spec, its tile row and shared-memory layout
    let t = plan.tiles.sm80();
    let launch = abi::launch(&plan);
    let info = manifest::kernel(spec, &Tuning::NONE); // what manifest.json says about it
    let mut s = String::new();
    let _ = writeln!(
        s,
        "kernel   {spec} (.target {}, PTX ISA {})",
        info.target, info.ptx_version
    );
    let _ = writeln!(
        s,
        "tiles    block_m {} x block_n {}, {} warps ({} threads), {} stages, {} sweep(s)",
        t.block_m,
        t.block_n,
        t.warps,
        t.threads(),
        t.stages,
        t.sweeps
    );
    let opt_in = if info.launch.needs_smem_opt_in {
        ", above 48 KiB: raise the limit first"
    } else {
        ""
    };
    let _ = writeln!(
        s,
        "smem     {} bytes dynamic shared memory{opt_in}",
        launch.dynamic_smem_bytes
    );
    let _ = writeln!(
        s,
        "launch   block {:?}, grid ({})",
        launch.block,
        launch.grid.join(", ")
    );
    let _ = writeln!(s, "params   {} in launch order:", info.params.len());
    for p in abi::params(spec.pass) {
        let _ = writeln!(s, "  {:<16} .{:<4} {}", p.name, p.ty.name(), p.meaning);
    }
    s
}

/// Parses `[NAME] [-o FILE]`.
fn parse_args(args: &[String]) -> Result<(KernelSpec, Option<String>), Box<dyn Error>> {
    let (mut spec, mut out) = (DEFAULT, None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-o" | "--output" => out = Some(it.next().ok_or("-o needs a file name")?.clone()),
            name => spec = name.parse().map_err(|e: ParseSpecError| e.to_string())?,
        }
    }
    Ok((spec, out))
}

fn run(args: &[String]) -> Result<(), Box<dyn Error>> {
    let (spec, out) = parse_args(args)?;
    eprint!("{}", describe(&spec));
    let ptx = generate(&spec); // the whole module: header, one .entry, its body
    eprintln!(
        "ptx      {} lines, {} bytes",
        ptx.lines().count(),
        ptx.len()
    );
    match out {
        Some(path) => {
            std::fs::write(&path, &ptx)?;
            eprintln!("wrote    {path}");
        }
        None => {
            let mut stdout = std::io::stdout().lock();
            match stdout
                .write_all(ptx.as_bytes())
                .and_then(|()| stdout.flush())
            {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => return Err(e.into()),
                _ => {} // written, or the reader (e.g. `head`) stopped early
            }
        }
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = run(&args) {
        eprintln!("emit_ptx: {e}");
        std::process::exit(2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_spec_round_trips_through_its_name() {
        assert_eq!(DEFAULT.name(), "fa2_fwd_d128_bf16_causal_sm80");
        assert_eq!(
            "fa2_fwd_d128_bf16_causal_sm80".parse::<KernelSpec>(),
            Ok(DEFAULT)
        );
    }

    #[test]
    fn describes_and_generates_a_forward_and_a_backward_kernel() {
        for name in ["fa2_fwd_d128_bf16_causal_sm80", "fa2_bwd_d64_f16_sm80"] {
            let (spec, out) = parse_args(&[name.to_string()]).unwrap();
            assert_eq!((spec.name().as_str(), out), (name, None));
            let text = describe(&spec);
            assert!(text.contains(name) && text.contains("seqlen_q"), "{text}");
            let ptx = generate(&spec);
            assert!(ptx.contains(".target sm_80"), "no target line");
            assert!(ptx.contains(&format!(".entry {name}")), "no entry {name}");
        }
    }

    #[test]
    fn writes_the_ptx_file() {
        let path = std::env::temp_dir().join(format!("emit_ptx_test_{}.ptx", std::process::id()));
        let p = path.to_string_lossy().to_string();
        run(&["fa2_bwdpre_d64_bf16_sm80".into(), "-o".into(), p.clone()]).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(text.contains(".entry fa2_bwdpre_d64_bf16_sm80"));
    }

    #[test]
    fn rejects_a_bad_name() {
        assert!(parse_args(&["fa2_fwd_d100_bf16_sm80".into()]).is_err());
        assert!(parse_args(&["-o".into()]).is_err());
    }
}
