//! Signals to a broker or fault point by process id: stops, crashes and the fault points'
//! cut, stall and heal.

/// The signals tests and fault experiments send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM: orderly shutdown.
    Term,
    /// SIGKILL: a crash.
    Kill,
    /// SIGSTOP: a stall (the process keeps its sockets but does nothing).
    Stop,
    /// SIGCONT: the end of a stall.
    Cont,
    /// SIGUSR1: a fault point cuts its link.
    Usr1,
    /// SIGUSR2: a fault point stalls its link.
    Usr2,
    /// SIGHUP: a fault point heals its link.
    Hup,
}

/// Sends `signal` to process `pid` through `rustix` (the workspace forbids the unsafe FFI call,
/// and shelling out to `kill(1)` hid its errors).
pub fn send_signal(pid: u32, signal: Signal) -> std::io::Result<()> {
    use rustix::process::{kill_process, Pid, Signal as Raw};
    let raw = i32::try_from(pid).ok().and_then(Pid::from_raw);
    let pid = raw.ok_or_else(|| std::io::Error::other(format!("{pid} is not a process id")))?;
    let signal = match signal {
        Signal::Term => Raw::TERM,
        Signal::Kill => Raw::KILL,
        Signal::Stop => Raw::STOP,
        Signal::Cont => Raw::CONT,
        Signal::Usr1 => Raw::USR1,
        Signal::Usr2 => Raw::USR2,
        Signal::Hup => Raw::HUP,
    };
    kill_process(pid, signal).map_err(std::io::Error::from)
}

/// Whether process `pid` exists and is not a zombie (Linux `/proc`): a killed child that its
/// parent has not reaped yet is gone for every purpose a caller here has.
pub fn process_alive(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}
