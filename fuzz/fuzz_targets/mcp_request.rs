#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hivegate::fuzzing::mcp_request(data));
