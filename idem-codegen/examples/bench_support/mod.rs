//! Shared by the benchmark examples.
#![allow(dead_code, reason = "each example uses part of this module")]

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
