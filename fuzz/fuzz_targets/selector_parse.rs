#![no_main]
// Parse any bytes; a selector that parses must print and parse back to itself (see fuzz_parse).
libfuzzer_sys::fuzz_target!(|data: &[u8]| tidings_matching::selector::fuzz_parse(data));
