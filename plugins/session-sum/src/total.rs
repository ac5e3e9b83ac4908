//! A session's running total: exact while every number is an integer, floating
//! point from the first fraction (or integer overflow) on.

use serde::{Deserialize, Serialize};
use serde_json::Number;
use weir_guest::ValueWriter;
use weir_guest::window::Merge;

/// The count and sum of a session's numbers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Total {
    count: u64,
    sum: Sum,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
enum Sum {
    Integer(i64),
    Float(f64),
}

impl Default for Sum {
    fn default() -> Self {
        Sum::Integer(0)
    }
}

impl Sum {
    fn plus(self, other: Sum) -> Sum {
        match (self, other) {
            (Sum::Integer(a), Sum::Integer(b)) => match a.checked_add(b) {
                Some(sum) => Sum::Integer(sum),
                None => Sum::Float(a as f64 + b as f64),
            },
            (a, b) => Sum::Float(a.as_f64() + b.as_f64()),
        }
    }

    fn as_f64(self) -> f64 {
        match self {
            Sum::Integer(n) => n as f64,
            Sum::Float(x) => x,
        }
    }
}

impl Total {
    /// Adds one record's number.
    pub fn add(&mut self, number: &Number) {
        let term = match number.as_i64() {
            Some(n) => Sum::Integer(n),
            None => Sum::Float(number.as_f64().unwrap_or(f64::NAN)),
        };
        self.count += 1;
        self.sum = self.sum.plus(term);
    }

    /// How many numbers were added.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Writes the sum as JSON: an integer, or a float as serde_json prints it
    /// (`null` if it overflowed to infinity).
    pub fn write_sum(&self, out: &mut ValueWriter<'_>) {
        let written = match self.sum {
            Sum::Integer(n) => serde_json::to_writer(&mut *out, &n),
            Sum::Float(x) => serde_json::to_writer(&mut *out, &x),
        };
        debug_assert!(written.is_ok(), "writing to memory cannot fail");
    }
}

impl Merge for Total {
    fn merge(&mut self, later: Self) {
        self.count += later.count;
        self.sum = self.sum.plus(later.sum);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_exact_for_integers_and_falls_back_to_float() {
        let mut total = Total::default();
        total.add(&Number::from(i64::MAX));
        assert_eq!(total.sum, Sum::Integer(i64::MAX));
        total.add(&Number::from(1));
        assert!(matches!(total.sum, Sum::Float(_)));
        let mut total = Total::default();
        total.add(&Number::from(2));
        total.add(&Number::from_f64(0.5).unwrap());
        assert_eq!(total.sum, Sum::Float(2.5));
        assert_eq!(total.count(), 2);
    }
}
