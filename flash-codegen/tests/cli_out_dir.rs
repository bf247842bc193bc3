//! CLI layer, tests: `emit --all` writes its directory all or nothing. A failure while
//! writing (here a file size limit, `ulimit -f`, hit part way through the kernels) or
//! before (an output path under a file) leaves no partial directory and no temporary one,
//! and an existing directory exactly as it was; a success in an existing directory
//! replaces the generated files and leaves the others alone.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{BIN, TempDir, cli, stderr, tree};
use flash_codegen::KernelSpec;
use flash_codegen::manifest;

/// Runs the binary under a file size limit of `blocks` (512 bytes in dash, 1 KiB in bash)
/// with SIGXFSZ ignored, so that a write past it fails with EFBIG instead of killing the
/// process. 200 blocks: the first kernels (about 60 KiB each) fit, later ones (up to
/// 360 KiB) and manifest.json (800 KiB) do not.
#[cfg(unix)]
fn cli_with_file_size_limit(blocks: u32, args: &[&str]) -> Output {
    Command::new("/bin/sh")
        .arg("-c")
        .arg(format!(
            r#"trap '' XFSZ; ulimit -f {blocks} && exec "$0" "$@""#
        ))
        .arg(BIN)
        .args(args)
        .output()
        .expect("/bin/sh runs")
}

fn assert_failed_writing(o: &Output) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(e.contains("error: cannot write"), "{e}");
    assert!(e.contains("is left as it was"), "{e}");
    assert!(!e.contains("panicked"), "{e}");
}

fn file_count(dir: &Path) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

#[cfg(unix)]
#[test]
fn a_failed_write_leaves_no_directory() {
    let tmp = TempDir::new("fail-new");
    let out = tmp.arg("ptx-out");
    let o = cli_with_file_size_limit(200, &["emit", "--all", "--out-dir", &out]);
    assert_failed_writing(&o);
    // It failed in the temporary directory, after the first kernels were written there.
    let e = stderr(&o);
    assert!(e.contains("ptx-out.tmp-"), "{e}");
    assert!(!e.contains("fa2_fwd_d32_f16_sm80.ptx"), "{e}");
    assert!(
        tree(&tmp.0).is_empty(),
        "left behind: {:?}",
        tree(&tmp.0).keys()
    );
}

#[cfg(unix)]
#[test]
fn a_failed_write_leaves_an_existing_directory_as_it_was() {
    let tmp = TempDir::new("fail-existing");
    let dir = tmp.0.join("ptx-out");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("keep.txt"), "mine").unwrap();
    std::fs::write(dir.join("manifest.json"), "old manifest").unwrap();
    std::fs::write(dir.join("fa2_fwd_d32_f16_sm80.ptx"), "old ptx").unwrap();
    let before = tree(&tmp.0);

    let out = tmp.arg("ptx-out");
    let o = cli_with_file_size_limit(200, &["emit", "--all", "--out-dir", &out]);
    assert_failed_writing(&o);
    assert_eq!(tree(&tmp.0), before, "the directory changed");

    // Without the limit: the generated files are replaced, keep.txt stays.
    let o = cli(&["emit", "--all", "--out-dir", &out]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (specs, vars) = (KernelSpec::all(), manifest::sm90a::shipping());
    assert_eq!(
        file_count(&dir),
        specs.len() + vars.len() + 3,
        "kernels, manifest, schema, keep.txt"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("keep.txt")).unwrap(),
        "mine"
    );
    let text = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    let tuning = flash_codegen::Tuning::NONE;
    assert_eq!(
        text,
        manifest::manifest_with_sm90a(&specs, &vars, &tuning).to_json()
    );
    let spec: KernelSpec = "fa2_fwd_d32_f16_sm80".parse().unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.join(manifest::file_name(&spec))).unwrap(),
        flash_codegen::generate(&spec)
    );
    assert_eq!(file_count(&tmp.0), 1, "nothing next to the directory");
}

/// An output path under a file cannot be created: nothing is written anywhere.
#[test]
fn an_output_under_a_file_fails_and_writes_nothing() {
    let tmp = TempDir::new("under-file");
    std::fs::write(tmp.0.join("f"), "a file").unwrap();
    let before = tree(&tmp.0);
    for (out, why) in [
        ("f", "exists and is not a directory"),
        ("f/ptx-out", "cannot create directory"),
    ] {
        let o = cli(&["emit", "--all", "--out-dir", &tmp.arg(out)]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{out}: {e}");
        assert!(e.contains(why), "{out}: {e}");
        assert_eq!(tree(&tmp.0), before, "{out}: something was written");
    }
}

/// A directory where a generated file would go is refused before anything is written.
#[test]
fn a_directory_in_the_way_of_a_file_is_refused() {
    let tmp = TempDir::new("dir-in-the-way");
    std::fs::create_dir_all(tmp.0.join("ptx-out/manifest.json")).unwrap();
    let before = tree(&tmp.0);
    let o = cli(&["emit", "--all", "--out-dir", &tmp.arg("ptx-out")]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(e.contains("manifest.json is a directory"), "{e}");
    assert_eq!(tree(&tmp.0), before);
}
