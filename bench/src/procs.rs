//! What a measured process tree costs: CPU seconds (user + sys, including reaped children)
//! and memory (sum of VmRSS over the tree, and the largest VmHWM), read from /proc.

use std::collections::HashMap;
use std::fs;

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Usage {
    pub(crate) cpu_s: f64,
    pub(crate) rss_bytes: u64,
    pub(crate) hwm_bytes: u64,
}

/// The tree rooted at `root`, now. Processes that vanish mid-read are skipped.
pub(crate) fn sample(root: i32) -> Usage {
    let tick = ticks_per_second();
    let mut usage = Usage::default();
    for pid in tree(root) {
        if let Some(ticks) = cpu_ticks(pid) {
            usage.cpu_s += ticks as f64 / tick;
        }
        let (rss, hwm) = memory(pid);
        usage.rss_bytes += rss;
        usage.hwm_bytes = usage.hwm_bytes.max(hwm);
    }
    usage
}

fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// `root` and all its descendants.
fn tree(root: i32) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    if let Ok(entries) = fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
            if let Some(ppid) = stat_fields(pid).and_then(|f| f.get(1).and_then(|s| s.parse().ok())) {
                children.entry(ppid).or_default().push(pid);
            }
        }
    }
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        if let Some(kids) = children.get(&out[i]) {
            out.extend(kids);
        }
        i += 1;
    }
    out
}

/// Fields of /proc/<pid>/stat after the command name: [0] = state (field 3), [1] = ppid, ...
fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// utime + stime + cutime + cstime (fields 14..=17).
fn cpu_ticks(pid: i32) -> Option<u64> {
    let f = stat_fields(pid)?;
    let n = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok());
    Some(n(11)? + n(12)? + n(13)? + n(14)?)
}

fn memory(pid: i32) -> (u64, u64) {
    let Ok(text) = fs::read_to_string(format!("/proc/{pid}/status")) else { return (0, 0) };
    let kib = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (kib("VmRSS:"), kib("VmHWM:"))
}
