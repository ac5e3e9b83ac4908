//! Random JSON objects from a seed for the property tests of `weir_guest::json` and of
//! enrich's merge on raw bytes: mostly in the form serde_json writes, and otherwise
//! anything serde_json would rewrite (whitespace, escapes, numbers, nested key order,
//! depth) or refuse, each generator noting which.

/// A splitmix64 stream and what the text written so far holds.
pub(crate) struct Gen {
    state: u64,
    /// Percent chance of each construct being one serde_json would rewrite or refuse.
    noise: u64,
    /// Whether everything written since [`Gen::object`] began is in the form serde_json
    /// writes, so that `canonical_members` must take it.
    pub(crate) canonical: bool,
}

/// The strings a key is drawn from: short, so that objects repeat keys, and among
/// them the names enrich's property test configures.
pub(crate) const KEYS: [&str; 12] = [
    "a", "b", "ab", "user", "name", "page", "matched", "p_name", "é", "a b", "zz", "obj",
];

/// How serde_json reads some keys of [`KEYS`] written with escapes it would not write.
const ESCAPED_KEYS: [&str; 4] = [r#""\u0061""#, r#""n\u0061me""#, r#""\u00e9""#, r#""\/""#];

/// Escapes serde_json writes as such.
const CANONICAL_ESCAPES: [&str; 10] = [
    r#"\""#, r"\\", r"\n", r"\r", r"\t", r"\b", r"\f", r"\u0000", r"\u0001", r"\u001f",
];

/// Escapes serde_json reads but writes otherwise.
const OTHER_ESCAPES: [&str; 8] = [
    r"\/",
    r"\u00e9",
    r"\u0041",
    r"\ud83d\ude00",
    r"\u001F",
    r"\u000a",
    r"\u007f",
    r"\u0009",
];

/// What serde_json refuses inside a string.
const BAD_STRING_BYTES: [&[u8]; 5] = [b"\x01", b"\xff", b"\xc3", br"\ud800", br"\x"];

/// Integers serde_json writes back digit for digit.
const CANONICAL_NUMBERS: [&str; 8] = [
    "0",
    "7",
    "-7",
    "1700000000000",
    "18446744073709551615",
    "-9223372036854775808",
    "9223372036854775807",
    "-1",
];

/// Numbers serde_json reads but writes otherwise, or refuses.
const OTHER_NUMBERS: [&str; 14] = [
    "-0",
    "1.5",
    "1.50",
    "1e2",
    "1E+2",
    "2.0",
    "-0.0",
    "01",
    "-01",
    "18446744073709551616",
    "-9223372036854775809",
    "1e400",
    "123456789012345678901234567890",
    "-",
];

impl Gen {
    pub(crate) fn new(seed: u64, noise: u64) -> Self {
        Self {
            state: seed,
            noise,
            canonical: true,
        }
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub(crate) fn pick<'a, T: ?Sized>(&mut self, from: &[&'a T]) -> &'a T {
        from[self.below(from.len() as u64) as usize]
    }

    /// True with the noise's chance: time for something serde_json rewrites or refuses.
    fn noisy(&mut self) -> bool {
        let noisy = self.below(100) < self.noise;
        self.canonical &= !noisy;
        noisy
    }

    /// A JSON object (or, with noise, something near one); [`Gen::canonical`] says
    /// afterwards whether it is in the form serde_json writes.
    pub(crate) fn object(&mut self) -> Vec<u8> {
        self.canonical = true;
        let mut out = Vec::new();
        if self.below(8) == 0 {
            out.extend_from_slice(b" \n"); // around the object: serde_json skips it too
        }
        out.push(b'{');
        for i in 0..self.below(7) {
            if i > 0 {
                out.push(b',');
            }
            self.space(&mut out);
            if self.noisy() {
                let key = self.pick(&ESCAPED_KEYS);
                out.extend_from_slice(key.as_bytes());
            } else {
                let key = self.pick(&KEYS);
                self.plain_string(&mut out, key);
            }
            self.space(&mut out);
            out.push(b':');
            self.space(&mut out);
            self.value(&mut out, 1);
        }
        out.push(b'}');
        if self.below(8) == 0 {
            out.push(b'\n');
        }
        if self.noisy() {
            match self.below(3) {
                0 => out.truncate(self.below(out.len() as u64) as usize),
                1 => out.extend_from_slice(b"x"),
                _ => out.insert(1, b','),
            }
        }
        out
    }

    /// Whitespace between tokens, with noise.
    fn space(&mut self, out: &mut Vec<u8>) {
        if self.noisy() {
            out.push(*self.pick(&[&b' ', &b'\t', &b'\n', &b'\r']));
        }
    }

    fn plain_string(&mut self, out: &mut Vec<u8>, text: &str) {
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    }

    fn value(&mut self, out: &mut Vec<u8>, depth: usize) {
        match self.below(if depth < 4 { 7 } else { 5 }) {
            0 | 1 => self.string(out),
            2 => self.number(out),
            3 => {
                let word = if self.noisy() {
                    "nul"
                } else {
                    self.pick(&["true", "false", "null"])
                };
                out.extend_from_slice(word.as_bytes());
            }
            4 if self.below(4) == 0 => self.deep(out, depth),
            4 => self.number(out),
            5 => self.array(out, depth + 1),
            _ => self.nested(out, depth + 1),
        }
    }

    fn string(&mut self, out: &mut Vec<u8>) {
        out.push(b'"');
        for _ in 0..self.below(5) {
            match self.below(4) {
                0 | 1 => {
                    let plain = self.pick(&["abc", " X/", "user-000123", "_-:.0", "{\"}"]);
                    // The quote inside the last one must be escaped: \"
                    out.extend_from_slice(plain.replace('"', "\\\"").as_bytes());
                }
                2 => out.extend_from_slice(self.pick(&["é", "😀", "中", "\u{7f}"]).as_bytes()),
                _ if self.noisy() => {
                    if self.below(3) == 0 {
                        out.extend_from_slice(self.pick(&BAD_STRING_BYTES));
                    } else {
                        out.extend_from_slice(self.pick(&OTHER_ESCAPES).as_bytes());
                    }
                }
                _ => out.extend_from_slice(self.pick(&CANONICAL_ESCAPES).as_bytes()),
            }
        }
        out.push(b'"');
    }

    fn number(&mut self, out: &mut Vec<u8>) {
        let number = if self.noisy() {
            self.pick(&OTHER_NUMBERS).to_owned()
        } else if self.below(2) == 0 {
            self.pick(&CANONICAL_NUMBERS).to_owned()
        } else if self.below(2) == 0 {
            (self.next() >> self.below(64)).to_string()
        } else {
            (-((self.next() >> (1 + self.below(63))) as i64) - 1).to_string()
        };
        out.extend_from_slice(number.as_bytes());
    }

    fn array(&mut self, out: &mut Vec<u8>, depth: usize) {
        out.push(b'[');
        for i in 0..self.below(4) {
            if i > 0 {
                out.push(b',');
                self.space(out);
            }
            self.value(out, depth);
        }
        out.push(b']');
    }

    /// A nested object: its keys in increasing order, unless noise repeats or swaps them.
    fn nested(&mut self, out: &mut Vec<u8>, depth: usize) {
        let mut keys: Vec<&str> = (0..self.below(4)).map(|_| self.pick(&KEYS)).collect();
        keys.sort_unstable();
        keys.dedup();
        if keys.len() > 1 && self.noisy() {
            if self.below(2) == 0 {
                keys.swap(0, 1);
            } else {
                keys[1] = keys[0];
            }
        }
        out.push(b'{');
        for (i, key) in keys.into_iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            self.plain_string(out, key);
            out.push(b':');
            self.value(out, depth);
        }
        out.push(b'}');
    }

    /// Arrays nested around `depth` deep, across `canonical_members`' limit of 32.
    fn deep(&mut self, out: &mut Vec<u8>, depth: usize) {
        let levels = 24 + self.below(16) as usize;
        if depth + levels > weir_guest::json::MAX_DEPTH {
            self.canonical = false;
        }
        out.extend(std::iter::repeat_n(b'[', levels));
        out.push(b'1');
        out.extend(std::iter::repeat_n(b']', levels));
    }
}
