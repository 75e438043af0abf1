//! Integration tests of the client against small fake brokers (`client/fake.rs`), over real
//! sockets on 127.0.0.1. Every wait is bounded.

mod fake;
mod guaranteed;
mod tcp;
mod udp;
