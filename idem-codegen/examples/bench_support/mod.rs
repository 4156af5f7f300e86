//! Shared by the benchmark examples.
#![allow(dead_code, reason = "each example uses part of this module")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The value after `--name` in `args`.
pub fn option(args: &[String], name: &str) -> Option<String> {
    let at = args.iter().position(|a| a == name)?;
    args.get(at + 1).cloned()
}

/// This process's peak resident memory (`VmHWM`) in KiB; 0 where
/// `/proc/self/status` is unavailable.
pub fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// The largest RSS (KiB) of `root` and its descendants right now.
pub fn tree_rss_kib(root: u32) -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut parents = std::collections::HashMap::new();
    let mut rss = std::collections::HashMap::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse::<u64>().ok())
        };
        parents.insert(pid, field("PPid:").unwrap_or(0) as u32);
        rss.insert(pid, field("VmRSS:").unwrap_or(0));
    }
    let in_tree = |mut pid: u32| {
        while pid > 1 {
            if pid == root {
                return true;
            }
            pid = parents.get(&pid).copied().unwrap_or(0);
        }
        false
    };
    rss.iter()
        .filter(|(pid, _)| in_tree(**pid))
        .map(|(_, kib)| *kib)
        .max()
        .unwrap_or(0)
}

/// Runs `command`, returning wall time and the largest process RSS seen.
pub fn measured(
    command: &mut std::process::Command,
) -> anyhow::Result<(std::time::Duration, u64, bool)> {
    let started = std::time::Instant::now();
    let mut child = command.spawn()?;
    let mut peak = 0;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok((started.elapsed(), peak, status.success()));
        }
        peak = peak.max(tree_rss_kib(child.id()));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The reason counted for a value the spec leaves open.
pub const FREE_FORM: &str = "free-form: the spec does not constrain it";

/// `serde_json::Value` fields of the Rust files under `src`, by reason
/// (see [`untyped`]).
pub fn untyped_in(src: &Path) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(src) else {
        return counts;
    };
    for entry in entries.flatten() {
        if let Ok(code) = std::fs::read_to_string(entry.path()) {
            for (reason, n) in untyped(&code) {
                *counts.entry(reason).or_default() += n;
            }
        }
    }
    counts
}

/// `serde_json::Value` fields of generated `code`, by the reason their doc
/// comment gives (`Untyped: …`, or `Free-form JSON` where the spec leaves
/// the value open), with locations and names taken out so that like
/// reasons count together.
pub fn untyped(code: &str) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for line in code.lines() {
        let doc = line.trim_start();
        let Some(doc) = doc.strip_prefix("///") else {
            continue;
        };
        let doc = doc.trim();
        let reason = if doc.starts_with("Free-form JSON") {
            FREE_FORM.to_owned()
        } else if let Some(reason) = doc.strip_prefix("Untyped: ") {
            general(reason)
        } else {
            continue;
        };
        *counts.entry(reason).or_default() += 1;
    }
    counts
}

/// `reason` without its location (`(spec.json:1:2).`) and with quoted
/// names as `…`.
fn general(reason: &str) -> String {
    let reason = reason.trim_end_matches('.');
    let reason = match reason.rfind(" (") {
        Some(i) if reason.ends_with(')') && reason[i..].contains(':') => &reason[..i],
        _ => reason,
    };
    let mut out = String::new();
    for (i, part) in reason.split('`').enumerate() {
        if i % 2 == 1 {
            // Keywords stay; a name or reference becomes `…`.
            let keyword = ["allOf", "oneOf", "anyOf", "not", "$ref", "false"].contains(&part);
            out.push('`');
            out.push_str(if keyword { part } else { "…" });
            out.push('`');
        } else {
            out.push_str(part);
        }
    }
    out
}

/// Every `.json`, `.yaml` and `.yml` file under `dir`, sorted.
pub fn documents(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(folder) = todo.pop() {
        for entry in std::fs::read_dir(&folder)? {
            let path = entry?.path();
            if path.is_dir() {
                todo.push(path);
            } else if path
                .extension()
                .is_some_and(|e| e == "json" || e == "yaml" || e == "yml")
            {
                found.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}

/// `n` of `items`, chosen by a seeded shuffle (SplitMix64 driving
/// Fisher-Yates), so a sample is the same on every machine; in the
/// original order.
pub fn sample<T: Clone + Ord>(items: &[T], n: usize, seed: u64) -> Vec<T> {
    let mut state = seed;
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut order: Vec<usize> = (0..items.len()).collect();
    for i in (1..order.len()).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    let mut picked: Vec<T> = order.iter().take(n).map(|&i| items[i].clone()).collect();
    picked.sort();
    picked
}
