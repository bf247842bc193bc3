//! CLI layer: the kernels the command lists, names and writes: every sm_80 spec
//! ([`KernelSpec::all`]), then the shipping sm_90a forwards ([`sm90a::shipping`]).

use flash_codegen::kernels::sm90::fwd;
use flash_codegen::manifest::{self, sm90a};
use flash_codegen::{KernelSpec, Tuning};

/// One kernel the command can write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// An sm_80 kernel, by its spec.
    Sm80(KernelSpec),
    /// A shipping sm_90a forward.
    Sm90a(fwd::Variant),
}

impl Kernel {
    /// The entry name (the file stem).
    pub fn name(&self) -> String {
        match self {
            Kernel::Sm80(s) => s.name(),
            Kernel::Sm90a(v) => v.name(),
        }
    }

    /// The file `emit --all` writes it to.
    pub fn file_name(&self) -> String {
        match self {
            Kernel::Sm80(s) => manifest::file_name(s),
            Kernel::Sm90a(v) => sm90a::file_name(v),
        }
    }

    /// Its PTX; `tuning` replaces sm_80 tile rows only.
    pub fn ptx(&self, tuning: &Tuning) -> String {
        match self {
            Kernel::Sm80(s) => flash_codegen::generate_tuned(s, tuning),
            Kernel::Sm90a(v) => sm90a::ptx(*v),
        }
    }
}

/// Which architecture's kernels `emit --all` writes (`--arch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ArchFilter {
    /// The sm_80 kernels (the manifest's `kernels`).
    Sm80,
    /// The sm_90a kernels (the manifest's `sm90a.kernels`).
    Sm90a,
}

/// The sm_80 specs and sm_90a variants of `arch` (`None`: all of both).
pub fn selected(arch: Option<ArchFilter>) -> (Vec<KernelSpec>, Vec<fwd::Variant>) {
    let sm80 = arch.is_none_or(|a| a == ArchFilter::Sm80);
    let sm90 = arch.is_none_or(|a| a == ArchFilter::Sm90a);
    (
        if sm80 { KernelSpec::all() } else { Vec::new() },
        if sm90 { sm90a::shipping() } else { Vec::new() },
    )
}

/// Every kernel, sm_80 first, in `list` order.
pub fn all() -> Vec<Kernel> {
    let (specs, vars) = selected(None);
    let sm80 = specs.into_iter().map(Kernel::Sm80);
    sm80.chain(vars.into_iter().map(Kernel::Sm90a)).collect()
}

/// Parses a kernel name; on failure names the closest valid one.
pub fn parse(s: &str) -> Result<Kernel, String> {
    if let Some(v) = sm90a::shipping().into_iter().find(|v| v.name() == s) {
        return Ok(Kernel::Sm90a(v));
    }
    s.parse::<KernelSpec>().map(Kernel::Sm80).map_err(|e| {
        let names: Vec<String> = all().iter().map(Kernel::name).collect();
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
        let e = parse("fa2_fwd_d128_bf16_casual_sm80").unwrap_err();
        assert!(
            e.contains("did you mean `fa2_fwd_d128_bf16_causal_sm80`?"),
            "{e}"
        );
        let far = parse("x").unwrap_err();
        assert!(!far.contains("did you mean"), "{far}");
        let e = parse("fa3_fwd_d128_bf16_casual_ovl_pp_m128_dyn_tst_sm90a").unwrap_err();
        assert!(
            e.contains("did you mean `fa3_fwd_d128_bf16_causal_ovl_pp_m128_dyn_tst_sm90a`?"),
            "{e}"
        );
    }

    /// Every listed name parses back to its kernel; the filters split the list.
    #[test]
    fn names_parse_back_and_filters_split() {
        let all = all();
        for k in &all {
            assert_eq!(parse(&k.name()), Ok(*k));
        }
        let (sm80, none) = selected(Some(ArchFilter::Sm80));
        let (none2, sm90) = selected(Some(ArchFilter::Sm90a));
        assert!(none.is_empty() && none2.is_empty());
        assert_eq!((sm90.len(), sm80.len() + sm90.len()), (32, all.len()));
    }
}
