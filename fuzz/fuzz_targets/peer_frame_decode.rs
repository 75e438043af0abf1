#![no_main]
// Any bytes from a peer: the decoder must not panic, and every frame it accepts must re-encode to
// exactly the bytes it came from. Links only tidings-wire, where the peer frames live.
libfuzzer_sys::fuzz_target!(|data: &[u8]| tidings_wire::peer::check_decoder(data));
