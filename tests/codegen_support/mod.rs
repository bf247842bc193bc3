//! Helpers shared by the integration tests: reading printed PTX back and finding ptxas.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

/// Every module the project emits: each `KernelSpec::all()` variant plus the mma probe
/// for both dtypes, as (name, PTX text).
pub fn all_modules() -> Vec<(String, String)> {
    use flash_codegen::{DType, KernelSpec, kernels::sm80::probe, ptx::print};
    let mut v: Vec<(String, String)> = KernelSpec::all()
        .iter()
        .map(|s| (s.name(), flash_codegen::generate(s)))
        .collect();
    for d in DType::ALL {
        v.push((probe::entry_name(d), print::module(&probe::module(d))));
    }
    v
}

/// `.reg .b32 %r<N>;` lines: prefix -> N.
pub fn declared_regs(ptx: &str) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for line in ptx.lines().map(str::trim) {
        let Some(rest) = line.strip_prefix(".reg ") else {
            continue;
        };
        let decl = rest
            .split_whitespace()
            .nth(1)
            .expect(".reg line has a name");
        let (prefix, n) = decl
            .trim_end_matches(';')
            .trim_end_matches('>')
            .split_once('<')
            .expect(".reg %x<N>");
        let n: u32 = n.parse().expect("register count");
        assert!(
            out.insert(prefix.to_string(), n).is_none(),
            "{prefix} declared twice"
        );
    }
    out
}

/// Every virtual register operand (`%r12`, `%rd3`, `%p0`, `%f7`, `%h2`) in the instruction lines,
/// as (prefix, number). Special registers (`%tid.x`, `%laneid`, `%ctaid.y`) are skipped.
pub fn used_regs(ptx: &str) -> Vec<(String, u32)> {
    instruction_lines(ptx)
        .into_iter()
        .flat_map(regs_in_line)
        .collect()
}

/// The virtual registers named in one line of PTX, in order.
pub fn regs_in_line(line: &str) -> Vec<(String, u32)> {
    let bytes = line.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(pos) = line[i..].find('%') {
        let start = i + pos + 1;
        let letters = bytes[start..]
            .iter()
            .take_while(|c| c.is_ascii_lowercase())
            .count();
        let digits = bytes[start + letters..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        let end = start + letters + digits;
        let name = &line[start..start + letters];
        let special = digits == 0 || bytes.get(end) == Some(&b'.');
        if !special && ["p", "r", "f", "rd", "h"].contains(&name) {
            let n = line[start + letters..end].parse().expect("register number");
            out.push((format!("%{name}"), n));
        }
        i = end;
    }
    out
}

/// The printed prefix of a register class.
pub fn prefix(c: flash_codegen::ptx::RegClass) -> &'static str {
    use flash_codegen::ptx::RegClass;
    match c {
        RegClass::Pred => "%p",
        RegClass::B32 => "%r",
        RegClass::F32 => "%f",
        RegClass::B64 => "%rd",
        RegClass::B16 => "%h",
    }
}

/// The instruction lines of a module's bodies, guard included, without indentation:
/// everything inside `{ }` except `.reg` declarations, labels and comments.
pub fn instruction_lines(ptx: &str) -> Vec<&str> {
    let mut in_body = false;
    let mut out = Vec::new();
    for raw in ptx.lines() {
        let line = raw.trim();
        match line {
            "{" => in_body = true,
            "}" => in_body = false,
            _ if !in_body || line.is_empty() => {}
            _ if line.starts_with("//") || line.starts_with(".reg") || line.ends_with(':') => {}
            _ => out.push(line),
        }
    }
    out
}

/// The opcode of an instruction line: its first token once a guard (`@%p1`, `@!%p1`) is
/// stripped, e.g. `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32`.
pub fn opcode(line: &str) -> &str {
    let mut tokens = line.split_whitespace();
    let first = tokens.next().unwrap_or("");
    let op = if first.starts_with('@') {
        tokens.next().unwrap_or("")
    } else {
        first
    };
    op.trim_end_matches(';')
}

/// How to get ptxas, printed when it is missing.
pub const PTXAS_HELP: &str = "ptxas not found: set PTXAS=/path/to/ptxas or put ptxas on PATH. \
It comes with `pip install nvidia-cuda-nvcc==13.0.88` (at <site-packages>/nvidia/cu13/bin/ptxas, \
chmod +x it); `bash .ci/run` installs it into .ci-cache/ and runs the tests with it.";

/// The ptxas to use: env PTXAS, else `ptxas` on PATH. `None` when neither runs.
pub fn find_ptxas() -> Option<PathBuf> {
    let candidate = std::env::var_os("PTXAS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("ptxas"));
    let ok = Command::new(&candidate)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(candidate)
}

/// ptxas, or: with CI=true a failing test, otherwise a notice and `None` (skip).
pub fn ptxas_or_skip(test: &str) -> Option<PathBuf> {
    if let Some(p) = find_ptxas() {
        return Some(p);
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    assert!(!ci, "{test}: {PTXAS_HELP}");
    eprintln!("NOTICE {test}: skipped. {PTXAS_HELP}");
    None
}

/// What `ptxas -v` reported for one entry.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PtxasReport {
    pub registers: u32,
    pub smem_bytes: u32,
    pub stack_frame: u32,
    pub spill_stores: u32,
    pub spill_loads: u32,
}

/// Assembles `ptx` for `arch` (`sm_80`) with `-v`; the parsed report or ptxas's output.
pub fn assemble(ptxas: &PathBuf, name: &str, arch: &str, ptx: &str) -> Result<PtxasReport, String> {
    assemble_log(ptxas, name, arch, ptx).map(|(r, _)| r)
}

/// [`assemble`], with ptxas's whole output beside the report (its performance notes, such
/// as `C7520`: wgmma serialised).
pub fn assemble_log(
    ptxas: &PathBuf,
    name: &str,
    arch: &str,
    ptx: &str,
) -> Result<(PtxasReport, String), String> {
    let dir = std::env::temp_dir().join(format!("flash-ptx-ptxas-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let src = dir.join(format!("{name}.{arch}.ptx"));
    let bin = dir.join(format!("{name}.{arch}.cubin"));
    std::fs::write(&src, ptx).map_err(|e| e.to_string())?;
    let out = Command::new(ptxas)
        .arg(format!("-arch={arch}"))
        .arg("-v")
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", ptxas.display()))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_file(&src);
    let _ = std::fs::remove_file(&bin);
    if !out.status.success() {
        return Err(text);
    }
    let report =
        parse_report(&text).ok_or_else(|| format!("unexpected ptxas -v output:\n{text}"))?;
    Ok((report, text))
}

/// Reads `Used N registers ... M bytes smem` and the stack/spill line of `ptxas -v`.
pub fn parse_report(text: &str) -> Option<PtxasReport> {
    let num_before = |line: &str, unit: &str| -> Option<u32> {
        let i = line.find(unit)?;
        line[..i].split_whitespace().last()?.parse().ok()
    };
    let mut r = PtxasReport::default();
    let (mut seen_used, mut seen_spill) = (false, false);
    for line in text.lines() {
        if line.contains("bytes stack frame") {
            r.stack_frame = num_before(line, "bytes stack frame")?;
            r.spill_stores = num_before(line, "bytes spill stores")?;
            r.spill_loads = num_before(line, "bytes spill loads")?;
            seen_spill = true;
        }
        if line.contains("Used ") && line.contains(" registers") {
            r.registers = num_before(line, " registers")?;
            r.smem_bytes = num_before(line, " bytes smem").unwrap_or(0);
            seen_used = true;
        }
    }
    (seen_used && seen_spill).then_some(r)
}
