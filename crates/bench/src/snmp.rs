//! The kernel's UDP counters (`/proc/net/snmp`), so an experiment can say where datagrams were
//! lost: `RcvbufErrors` counts datagrams dropped because a receiving socket's buffer was full
//! (here: the bench's own subscribers), `SndbufErrors` those a sender could not queue. They are
//! machine-wide, so a point's delta includes any other UDP traffic on the machine (on an idle
//! one, none to speak of). Not on Linux, or unreadable: `None`.

/// The UDP counters at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UdpCounters {
    /// Datagrams dropped for a full receive buffer.
    pub rcvbuf_errors: u64,
    /// Datagrams not sent for a full send buffer.
    pub sndbuf_errors: u64,
}

impl UdpCounters {
    /// Reads them now.
    pub fn read() -> Option<UdpCounters> {
        Self::parse(&std::fs::read_to_string("/proc/net/snmp").ok()?)
    }

    /// From the text of `/proc/net/snmp`: the `Udp:` header line names the columns of the
    /// `Udp:` line after it.
    pub fn parse(text: &str) -> Option<UdpCounters> {
        let mut udp = text.lines().filter(|line| line.starts_with("Udp:"));
        let (names, values) = (udp.next()?, udp.next()?);
        let find = |name: &str| {
            let at = names.split_whitespace().position(|n| n == name)?;
            values.split_whitespace().nth(at)?.parse().ok()
        };
        Some(UdpCounters { rcvbuf_errors: find("RcvbufErrors")?, sndbuf_errors: find("SndbufErrors")? })
    }

    /// What grew since `before`.
    pub fn since(&self, before: &UdpCounters) -> UdpCounters {
        UdpCounters {
            rcvbuf_errors: self.rcvbuf_errors.saturating_sub(before.rcvbuf_errors),
            sndbuf_errors: self.sndbuf_errors.saturating_sub(before.sndbuf_errors),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_udp_lines_are_read_by_column_name() {
        let text = "Ip: Forwarding DefaultTTL\nIp: 1 64\nUdp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors\nUdp: 10 0 7 20 7 3 0\nUdpLite: InDatagrams\nUdpLite: 0\n";
        let c = UdpCounters::parse(text).unwrap();
        assert_eq!(c, UdpCounters { rcvbuf_errors: 7, sndbuf_errors: 3 });
        assert_eq!(
            c.since(&UdpCounters { rcvbuf_errors: 2, sndbuf_errors: 5 }),
            UdpCounters { rcvbuf_errors: 5, sndbuf_errors: 0 }
        );
        assert_eq!(UdpCounters::parse("Ip: a\nIp: 1\n"), None);
    }
}
