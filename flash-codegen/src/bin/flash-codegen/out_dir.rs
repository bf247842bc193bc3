//! CLI layer: `emit --all`'s output directory, written all or nothing.
//!
//! Every file is first written into a fresh temporary directory; only when all of them
//! are written do they take their place, so a failure (a full disk, a file size limit, a
//! permission) never leaves a half-written output behind:
//!
//! - DIR does not exist: the files go into `DIR.tmp-<pid>` next to it (missing parents
//!   are created, and stay), which is then renamed to DIR: DIR appears complete or not at
//!   all.
//! - DIR exists: the files go into `DIR/.flash-codegen.tmp-<pid>` (inside DIR, so on its
//!   file system even when DIR is a mount point), then each is renamed over its namesake
//!   in DIR, in the order given (the caller puts manifest.json last), and the temporary
//!   directory is removed. Each file is replaced atomically; other files in DIR (yours,
//!   or kernels an earlier version wrote that no longer exist) are left alone.
//!
//! On a failure before the files take their place the temporary directory is removed and
//! DIR is as it was.

use std::fs;
use std::path::{Path, PathBuf};

/// One file to write: its name inside the output directory and its contents.
pub type OutFile = (String, String);

/// Checks what can be checked before the (slow) generation: DIR, if it exists, is a
/// directory, and none of the names to write is a directory inside it.
pub fn precheck<'a>(dir: &Path, names: impl IntoIterator<Item = &'a str>) -> Result<(), String> {
    if !dir.exists() {
        return Ok(());
    }
    if !dir.is_dir() {
        return Err(format!("{} exists and is not a directory", dir.display()));
    }
    for name in names {
        let target = dir.join(name);
        if target.is_dir() {
            return Err(format!(
                "{} is a directory, where a file would be written",
                target.display()
            ));
        }
    }
    Ok(())
}

/// Writes `files` into `dir`, all or nothing (see the module's documentation).
pub fn write_all(dir: &Path, files: &[OutFile]) -> Result<(), String> {
    precheck(dir, files.iter().map(|(name, _)| name.as_str()))?;
    let pid = std::process::id();
    let exists = dir.exists();
    let tmp = if exists {
        dir.join(format!(".flash-codegen.tmp-{pid}"))
    } else {
        let abs = std::path::absolute(dir)
            .map_err(|e| format!("cannot resolve {}: {e}", dir.display()))?;
        let (Some(parent), Some(name)) = (abs.parent(), abs.file_name()) else {
            return Err(format!("{} cannot be an output directory", dir.display()));
        };
        fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create directory {}: {e}", parent.display()))?;
        let mut tmp_name = name.to_os_string();
        tmp_name.push(format!(".tmp-{pid}"));
        parent.join(tmp_name)
    };
    let staged = Staged::create(tmp)?;
    for (name, text) in files {
        let path = staged.0.join(name);
        fs::write(&path, text).map_err(|e| {
            format!(
                "cannot write {}: {e} ({} is left as it was)",
                path.display(),
                dir.display()
            )
        })?;
    }
    if exists {
        for (done, (name, _)) in files.iter().enumerate() {
            fs::rename(staged.0.join(name), dir.join(name)).map_err(|e| {
                format!(
                    "cannot move {name} into {}: {e} (the first {done} of {} files are replaced)",
                    dir.display(),
                    files.len()
                )
            })?;
        }
    } else {
        fs::rename(&staged.0, dir).map_err(|e| {
            format!(
                "cannot rename {} to {}: {e}",
                staged.0.display(),
                dir.display()
            )
        })?;
    }
    Ok(())
}

/// The temporary directory, removed when dropped (it is gone already after a rename).
struct Staged(PathBuf);

impl Staged {
    fn create(path: PathBuf) -> Result<Self, String> {
        // A leftover of an earlier run with the same process id (killed before cleaning up).
        if path.exists() {
            fs::remove_dir_all(&path)
                .map_err(|e| format!("cannot remove stale {}: {e}", path.display()))?;
        }
        fs::create_dir(&path)
            .map_err(|e| format!("cannot create directory {}: {e}", path.display()))?;
        Ok(Staged(path))
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if self.0.exists() {
            let _ = fs::remove_dir_all(&self.0);
        }
    }
}
