#![no_main]
// Any bytes: the stream decoder must not panic, and every frame it accepts must re-encode to itself.
libfuzzer_sys::fuzz_target!(|data: &[u8]| tidings_wire::check_decoder(data));
