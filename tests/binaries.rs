//! Where the tests' own build of weir lives: `scripts/test` builds it with the
//! `fault-injection` feature (the `WEIR_FAULT` switch), which must never replace the
//! binary a user built with `cargo build --release`.

use std::path::Path;

use crate::support;

#[test]
#[cfg_attr(not(feature = "fault-injection"), ignore = "only a fault-injection build must stay apart")]
fn a_fault_injection_build_is_never_the_users_release_binary() {
    let tested = support::job::binary();
    let users = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release");
    let same_dir = |a: &Path, b: &Path| matches!((a.canonicalize(), b.canonicalize()), (Ok(a), Ok(b)) if a == b);
    let tested_dir = tested.parent().expect("the binary is in a directory");
    assert!(
        !same_dir(tested_dir, &users),
        "this fault-injection build is {}, where `cargo build --release` puts the user's weir: \
         build the tests with CARGO_TARGET_DIR set apart, as scripts/test does",
        tested.display()
    );
}
