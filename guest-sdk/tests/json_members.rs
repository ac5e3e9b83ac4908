//! `json::canonical_members` against serde_json on many random objects: whatever it
//! takes, serde_json parses, and the members it found, sorted by `sort_members` and put
//! back together, are byte for byte what serde_json writes for the parsed object;
//! whatever is written the way serde_json writes it, it takes.

mod random_json;

use random_json::Gen;
use serde_json::{Map, Value};
use weir_guest::json::{Member, canonical_members, sort_members};

/// The object serde_json writes for the members, in their order.
fn rebuilt(object: &[u8], members: &[Member]) -> Vec<u8> {
    let mut out = vec![b'{'];
    for (i, member) in members.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(member.raw(object));
    }
    out.push(b'}');
    out
}

#[test]
fn what_it_takes_is_what_serde_json_writes_back() {
    const OBJECTS: u64 = 40_000;
    let (mut taken, mut refused_valid, mut refused_invalid) = (0, 0, 0);
    let mut members = Vec::new();
    for seed in 0..OBJECTS {
        let mut generator = Gen::new(seed, 4);
        let object = generator.object();
        let shown = String::from_utf8_lossy(&object);
        let parsed = serde_json::from_slice::<Map<String, Value>>(&object);
        if !canonical_members(&object, &mut members) {
            assert!(!generator.canonical, "refused {shown}");
            match parsed {
                Ok(_) => refused_valid += 1,
                Err(_) => refused_invalid += 1,
            }
            continue;
        }
        taken += 1;
        let parsed =
            parsed.unwrap_or_else(|e| panic!("took {shown}, which serde_json refuses: {e}"));
        for member in &members {
            let value = member.value(&object);
            let reparsed: Value = serde_json::from_slice(value).unwrap();
            assert_eq!(serde_json::to_vec(&reparsed).unwrap(), value, "in {shown}");
            assert!(!member.key(&object).contains(&b'\\'), "{shown}");
        }
        sort_members(&object, &mut members);
        assert_eq!(
            String::from_utf8(rebuilt(&object, &members)).unwrap(),
            serde_json::to_string(&parsed).unwrap(),
            "from {shown}"
        );
    }
    // Each outcome is common enough to be tested.
    assert!(taken > OBJECTS / 3, "took {taken}");
    assert!(
        refused_valid > OBJECTS / 10,
        "refused {refused_valid} valid objects"
    );
    assert!(
        refused_invalid > OBJECTS / 20,
        "refused {refused_invalid} invalid ones"
    );
}

#[test]
fn sorting_keeps_the_last_of_a_repeated_key_as_serde_json_does() {
    let object = br#"{"b":1,"a":2,"b":3,"c":4,"a":5,"b":6}"#;
    let mut members = Vec::new();
    assert!(canonical_members(object, &mut members));
    sort_members(object, &mut members);
    assert_eq!(rebuilt(object, &members), br#"{"a":5,"b":6,"c":4}"#);
    let parsed: Map<String, Value> = serde_json::from_slice(object).unwrap();
    assert_eq!(
        serde_json::to_vec(&parsed).unwrap(),
        br#"{"a":5,"b":6,"c":4}"#
    );
}

#[test]
fn serde_json_maps_are_in_key_order() {
    // The merge on raw bytes relies on it: serde_json's `preserve_order` feature, were
    // anything to enable it, would keep text order instead.
    let parsed: Map<String, Value> = serde_json::from_str(r#"{"b":1,"é":2,"a":3}"#).unwrap();
    assert_eq!(
        serde_json::to_string(&parsed).unwrap(),
        r#"{"a":3,"b":1,"é":2}"#
    );
}
