//! Process metrics (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
//! `process_open_fds`, `process_max_fds`, `process_start_time_seconds`), the names every
//! Prometheus dashboard expects, read from `/proc/self` at each scrape.
//!
//! Read by hand because `prometheus-client` has no process collector; the values are a few
//! fields of `/proc/self/stat`, a count of `/proc/self/fd` and the file-limit, nothing that
//! deserves a dependency.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// The collector registered on the broker's registry.
#[derive(Debug, Default)]
pub struct ProcessCollector;

/// What one scrape read (the web view reads it too, for its CPU and memory charts).
pub(crate) struct Sample {
    pub(crate) cpu_seconds: f64,
    pub(crate) resident_bytes: i64,
    virtual_bytes: i64,
    start_time_seconds: f64,
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // A /proc that cannot be read (not Linux, or a sandbox) leaves the metrics out.
        if let Some(sample) = read_sample() {
            let cpu = ConstCounter::new(sample.cpu_seconds);
            let help = "User and system CPU time spent, in seconds";
            cpu.encode(encoder.encode_descriptor("process_cpu_seconds", help, None, cpu.metric_type())?)?;
            gauge(
                &mut encoder,
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                sample.resident_bytes,
            )?;
            gauge(&mut encoder, "process_virtual_memory_bytes", "Virtual memory size in bytes", sample.virtual_bytes)?;
            let start = ConstGauge::new(sample.start_time_seconds);
            let help = "Start time of the process since the Unix epoch, in seconds";
            start.encode(encoder.encode_descriptor(
                "process_start_time_seconds",
                help,
                None,
                start.metric_type(),
            )?)?;
        }
        if let Ok(entries) = std::fs::read_dir("/proc/self/fd") {
            gauge(&mut encoder, "process_open_fds", "Open file descriptors", entries.count() as i64)?;
        }
        if let Ok(limit) = max_fds() {
            gauge(&mut encoder, "process_max_fds", "The limit on open file descriptors", limit)?;
        }
        Ok(())
    }
}

fn gauge(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: i64) -> Result<(), std::fmt::Error> {
    let gauge = ConstGauge::new(value);
    gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)
}

pub(crate) fn read_sample() -> Option<Sample> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may contain spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    let ticks = rustix::param::clock_ticks_per_second() as f64;
    let page = rustix::param::page_size() as i64;
    let boot = std::fs::read_to_string("/proc/stat").ok()?;
    let boot_time: f64 = boot.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()?;
    Some(Sample {
        cpu_seconds: (field(14)? + field(15)?) as f64 / ticks,
        virtual_bytes: field(23)? as i64,
        resident_bytes: field(24)? as i64 * page,
        start_time_seconds: boot_time + field(22)? as f64 / ticks,
    })
}

fn max_fds() -> Result<i64, ()> {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    limit.current.map(|n| n as i64).ok_or(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_cpu_memory_and_a_start_time() {
        let sample = read_sample().expect("/proc/self/stat is readable on Linux");
        assert!(sample.resident_bytes > 0 && sample.virtual_bytes >= sample.resident_bytes);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        assert!(sample.start_time_seconds <= now + 1.0 && sample.start_time_seconds > now - 86_400.0 * 365.0);
        assert!(sample.cpu_seconds >= 0.0);
    }
}
