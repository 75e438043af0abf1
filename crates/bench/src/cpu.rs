//! CPU time of the processes in a run, from `/proc/PID/stat` (user + system time, in clock
//! ticks): on a machine where the brokers and the clients share the cores, what each process
//! spends per message says where the time goes. Read by the network and overhead experiments
//! and by `bench catch-up` (time waiting for a CPU), so it sits below all of them.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Instant;

/// A process whose CPU time is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Process {
    /// A process by id: a broker, or a NATS node.
    Pid(u32),
    /// This process (the clients: publisher and subscribers).
    This,
    /// The children this process has waited for (the peer harness, which drives NATS).
    WaitedChildren,
    /// The threads of a process whose name (as the kernel keeps it, 15 bytes) starts with
    /// this: a broker's log writer, to tell the syncs' share of a broker's CPU.
    Threads(u32, &'static str),
}

/// CPU seconds of every watched process at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuSample {
    seconds: BTreeMap<String, f64>,
    taken: Instant,
}

/// CPU seconds each process spent between two samples, and the wall-clock seconds between them.
#[derive(Debug, Clone, PartialEq)]
pub struct Spent {
    /// By process name.
    pub by_process: BTreeMap<String, f64>,
    /// Wall-clock time.
    pub wall_secs: f64,
}

impl CpuSample {
    /// Reads the CPU time of each named process now; a process that cannot be read counts 0.
    pub fn take(processes: &[(&str, Process)]) -> CpuSample {
        let ticks = clock_ticks();
        let seconds = processes
            .iter()
            .map(|&(name, p)| {
                let path = match p {
                    Process::Pid(pid) => format!("/proc/{pid}/stat"),
                    Process::This | Process::WaitedChildren => "/proc/self/stat".to_string(),
                    Process::Threads(pid, prefix) => return (name.to_string(), threads(pid, prefix) as f64 / ticks),
                };
                let stat = std::fs::read_to_string(path).unwrap_or_default();
                let t = parse_stat(&stat).map_or(0, |t| match p {
                    Process::WaitedChildren => t.children,
                    _ => t.own,
                });
                (name.to_string(), t as f64 / ticks)
            })
            .collect();
        CpuSample { seconds, taken: Instant::now() }
    }

    /// What each process spent since `earlier`.
    pub fn since(&self, earlier: &CpuSample) -> Spent {
        let by_process = self
            .seconds
            .iter()
            .map(|(name, &now)| (name.clone(), now - earlier.seconds.get(name).copied().unwrap_or(now)))
            .collect();
        Spent { by_process, wall_secs: self.taken.duration_since(earlier.taken).as_secs_f64() }
    }
}

/// Adds CPU µs per received message of each process and of all together
/// Ticks of one process: its own (utime + stime) and its waited-for children's (cutime + cstime).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ticks {
    own: u64,
    children: u64,
}

/// Fields 14-17 of `/proc/PID/stat`; the command name (field 2) may hold spaces and
/// parentheses, so fields are counted after its last `)`.
fn parse_stat(stat: &str) -> Option<Ticks> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<u64> = rest.split_whitespace().skip(11).take(4).map_while(|f| f.parse().ok()).collect();
    match fields[..] {
        [utime, stime, cutime, cstime] => Some(Ticks { own: utime + stime, children: cutime + cstime }),
        _ => None,
    }
}

/// The directories of `pid`'s threads under `/proc` (none when it cannot be read).
fn tasks(pid: u32) -> impl Iterator<Item = std::path::PathBuf> {
    std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten().map(|task| task.path())
}

/// Ticks of the threads of `pid` whose name starts with `prefix` (0 when none can be read).
fn threads(pid: u32, prefix: &str) -> u64 {
    tasks(pid)
        .filter(|task| std::fs::read_to_string(task.join("comm")).is_ok_and(|comm| comm.starts_with(prefix)))
        .filter_map(|task| parse_stat(&std::fs::read_to_string(task.join("stat")).ok()?))
        .map(|t| t.own)
        .sum()
}

/// How long the threads of `pid` have been runnable but waiting for a CPU, in all (the second
/// field of each thread's `/proc/PID/task/TID/schedstat`; zero when it cannot be read): where
/// every core is busy, the time a latency-sensitive process loses before it even runs.
pub fn waited_for_cpu(pid: u32) -> std::time::Duration {
    let nanos = tasks(pid)
        .filter_map(|task| std::fs::read_to_string(task.join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum();
    std::time::Duration::from_nanos(nanos)
}

/// Context switches of all the live threads of `pid` so far, voluntary and not (the two
/// `ctxt_switches` lines of each `/proc/PID/task/TID/status`; zero when it cannot be read): how
/// often a process's threads gave up a core, which per message says how many thread
/// hand-offs its path takes. A thread's count goes with it when it ends.
pub fn context_switches(pid: u32) -> u64 {
    tasks(pid).filter_map(|task| std::fs::read_to_string(task.join("status")).ok()).map(|s| switches_in(&s)).sum()
}

/// The sum of the `voluntary_ctxt_switches` and `nonvoluntary_ctxt_switches` lines of a
/// `status` file.
fn switches_in(status: &str) -> u64 {
    status
        .lines()
        .filter_map(|line| {
            line.strip_prefix("voluntary_ctxt_switches:").or(line.strip_prefix("nonvoluntary_ctxt_switches:"))
        })
        .filter_map(|value| value.trim().parse::<u64>().ok())
        .sum()
}

/// Clock ticks per second (`getconf CLK_TCK`; 100, Linux's value, when it cannot be run).
fn clock_ticks() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse::<f64>().ok())
            .filter(|&t| t > 0.0)
            .unwrap_or(100.0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        let stat = "4242 (tokio (rt) 1) S 1 4242 4242 0 -1 4194560 500 0 0 0 150 25 7 3 20 0 4 0 1 2 3";
        assert_eq!(parse_stat(stat), Some(Ticks { own: 175, children: 10 }));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S 1 2"), None);
    }

    #[test]
    fn this_process_spends_cpu_time() {
        let watched = [("bench", Process::This), ("gone", Process::Pid(u32::MAX))];
        let before = CpuSample::take(&watched);
        // Spin until the kernel has charged at least one tick (or give up after 10 s).
        let start = std::time::Instant::now();
        let mut spent = CpuSample::take(&watched).since(&before);
        while spent.by_process["bench"] == 0.0 && start.elapsed() < std::time::Duration::from_secs(10) {
            std::hint::black_box((0..10_000u64).sum::<u64>());
            spent = CpuSample::take(&watched).since(&before);
        }
        assert!(spent.by_process["bench"] > 0.0, "{spent:?}");
        assert_eq!(spent.by_process["gone"], 0.0);
        assert!(spent.wall_secs > 0.0);
    }

    #[test]
    fn a_thread_is_read_apart_by_its_name() {
        // A named thread spins until the kernel has charged it a tick; the rest of this process
        // (the test harness) is not counted, and a name nobody has counts nothing.
        let pid = std::process::id();
        let watched = [("spinner", Process::Threads(pid, "cpu-spinner")), ("nobody", Process::Threads(pid, "no-such"))];
        let before = CpuSample::take(&watched);
        let spent = std::thread::Builder::new()
            .name("cpu-spinner".into())
            .spawn(move || {
                let start = std::time::Instant::now();
                let mut spent = CpuSample::take(&watched).since(&before);
                while spent.by_process["spinner"] == 0.0 && start.elapsed() < std::time::Duration::from_secs(10) {
                    std::hint::black_box((0..10_000u64).sum::<u64>());
                    spent = CpuSample::take(&watched).since(&before);
                }
                spent
            })
            .unwrap()
            .join()
            .unwrap();
        assert!(spent.by_process["spinner"] > 0.0, "{spent:?}");
        assert_eq!(spent.by_process["nobody"], 0.0);
    }

    #[test]
    fn switches_are_summed_from_both_lines_and_a_thread_that_sleeps_switches() {
        let status = "Name:\tx\nvoluntary_ctxt_switches:\t40\nnonvoluntary_ctxt_switches:\t2\n";
        assert_eq!(switches_in(status), 42);
        assert_eq!(switches_in("garbage"), 0);
        let pid = std::process::id();
        let before = context_switches(pid);
        for _ in 0..5 {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert!(context_switches(pid) >= before + 5, "five sleeps gave up the core five times");
        assert_eq!(context_switches(u32::MAX), 0);
    }

    #[test]
    fn threads_that_outnumber_the_cores_wait_for_them() {
        if !std::path::Path::new("/proc/self/schedstat").exists() {
            eprintln!("this kernel keeps no schedstat: nothing to read");
            return;
        }
        let before = waited_for_cpu(std::process::id());
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let end = std::time::Instant::now() + std::time::Duration::from_millis(300);
        let spinners: Vec<_> = (0..cores * 3)
            .map(|_| {
                std::thread::spawn(move || {
                    while std::time::Instant::now() < end {
                        std::hint::black_box((0..1_000u64).sum::<u64>());
                    }
                })
            })
            .collect();
        // Read while the spinners still run: a thread's wait goes with it when it ends.
        std::thread::sleep(std::time::Duration::from_millis(200));
        let waited = waited_for_cpu(std::process::id()).saturating_sub(before);
        spinners.into_iter().for_each(|s| s.join().unwrap());
        assert!(waited > std::time::Duration::ZERO, "three spinners per core never waited");
        assert_eq!(waited_for_cpu(u32::MAX), std::time::Duration::ZERO);
    }
}
