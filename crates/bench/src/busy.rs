//! CPU-bound neighbours for a run: `--busy N` starts N processes that spin (`sh -c 'while :;
//! do :; done'`, a shell builtin loop that makes no system calls) before the first point and
//! stops them after the last, so an experiment measures the system on a machine where other
//! work takes the cores, as it will be in production. They run at the bench's own priority
//! (a bench started under `nice` gives them its niceness).

use std::process::{Command, Stdio};

use crate::children::Children;
use crate::cpu::{CpuSample, Process};

/// The spinning processes; killed and reaped on drop.
pub struct Busy {
    children: Children,
}

impl Busy {
    /// Starts `n` spinning processes (none for 0).
    pub fn start(n: usize) -> std::io::Result<Busy> {
        let mut busy = Busy { children: Children::default() };
        for _ in 0..n {
            let child = Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?;
            busy.children.0.push(child);
        }
        Ok(busy)
    }

    /// Their CPU time now, to tell what share of a core they took over a point.
    pub fn sample(&self) -> CpuSample {
        let names: Vec<String> = self.children.0.iter().map(|c| format!("busy-{}", c.id())).collect();
        let processes: Vec<(&str, Process)> =
            names.iter().zip(&self.children.0).map(|(name, c)| (name.as_str(), Process::Pid(c.id()))).collect();
        CpuSample::take(&processes)
    }
}

/// Cores the spinning processes took between two samples (1.0: one whole core).
pub fn cores_taken(before: &CpuSample, after: &CpuSample) -> f64 {
    let spent = after.since(before);
    spent.by_process.values().sum::<f64>() / spent.wall_secs.max(1e-9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_process_takes_cpu_and_is_gone_after_drop() {
        let busy = Busy::start(1).unwrap();
        let pid = busy.children.0[0].id();
        let before = busy.sample();
        std::thread::sleep(std::time::Duration::from_millis(500));
        let taken = cores_taken(&before, &busy.sample());
        assert!(taken > 0.05, "it spins: {taken} cores");
        drop(busy);
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "reaped");
    }
}
