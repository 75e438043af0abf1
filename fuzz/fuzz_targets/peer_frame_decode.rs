#![no_main]
// Any bytes from a peer: the decoder must not panic, and every frame it accepts must re-encode to
// bytes that decode to the same frame.
libfuzzer_sys::fuzz_target!(|data: &[u8]| tidings_broker::cluster::frame::check_decoder(data));
