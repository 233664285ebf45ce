//! Replays every committed fuzzing corpus input (`fuzz/corpus/<target>/`) through the same entry points
//! the fuzz targets call, so what the fuzzers found interesting keeps working without building them.

use std::path::Path;

#[test]
fn every_committed_corpus_input_replays_without_a_panic() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz").join("corpus");
    for (name, target) in hivegate::fuzzing::TARGETS {
        let dir = root.join(name);
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let mut replayed = 0;
        for entry in entries {
            let path = entry.expect("a corpus entry").path();
            let input = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            if let Err(panic) = std::panic::catch_unwind(|| target(&input)) {
                panic!("{name}: {} panics: {panic:?}", path.display());
            }
            replayed += 1;
        }
        assert!(replayed > 0, "{name} has no corpus in {}", dir.display());
        eprintln!("{name}: {replayed} inputs replayed");
    }
}
