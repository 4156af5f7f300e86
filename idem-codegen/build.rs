//! Records the commit `idem` is built from, and the checkout's `origin`,
//! when it is built from a git checkout (`cargo install --path` from a
//! clone, `cargo install --git`): `idem workflow` pins the workflow's
//! install to the commit, and `idem generate` makes the crates it writes
//! depend on `idem-runtime` at that commit of that repository, which every
//! clone of the user's repository can fetch. A build from a packaged crate
//! has no checkout, and records nothing.

use std::path::Path;
use std::process::Command;

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let root = Path::new(&manifest).parent().unwrap_or(Path::new("."));
    let git = root.join(".git");
    if git.is_dir() {
        // A new commit or checkout moves HEAD or the branch it names. Only
        // files that exist are watched: a missing one would rerun every build.
        let mut watched = vec![git.join("HEAD"), git.join("packed-refs")];
        if let Ok(head) = std::fs::read_to_string(git.join("HEAD"))
            && let Some(branch) = head.trim().strip_prefix("ref: ")
        {
            watched.push(git.join(branch));
        }
        for file in watched.iter().filter(|f| f.is_file()) {
            println!("cargo:rerun-if-changed={}", file.display());
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
    let commit = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["rev-parse", "--verify", "HEAD"])
        .output()
        .ok()
        .filter(|out| out.status.success() && git.exists())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| s.len() == 40 && s.chars().all(|c| c.is_ascii_hexdigit()))
        .unwrap_or_default();
    let origin = if commit.is_empty() {
        String::new()
    } else {
        Command::new("git")
            .arg("-C")
            .arg(root)
            .args(["config", "--get", "remote.origin.url"])
            .output()
            .ok()
            .filter(|out| out.status.success())
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .map(|url| fetchable(url.trim(), root))
            .unwrap_or_default()
    };
    println!("cargo:rustc-env=IDEM_BUILD_COMMIT={commit}");
    println!("cargo:rustc-env=IDEM_BUILD_ORIGIN={origin}");
}

/// `url` as Cargo fetches a git dependency: a URL as it is, scp-like
/// `git@host:owner/repo` as `ssh://git@host/owner/repo`, and a local path
/// (relative to the checkout at `root`) as a `file://` URL.
fn fetchable(url: &str, root: &Path) -> String {
    if url.is_empty() || url.contains("://") {
        return url.to_owned();
    }
    if let Some((host, path)) = url.split_once(':')
        && !host.contains('/')
        && host.contains('@')
    {
        return format!("ssh://{host}/{}", path.trim_start_matches('/'));
    }
    let local = root.join(url);
    let local = std::fs::canonicalize(&local).unwrap_or(local);
    format!("file://{}", local.display())
}
