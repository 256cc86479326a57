//! The one condition test of busbar: what a selected value must satisfy. Routing on headers,
//! on the streaming XPath subset and on full XPath all use it.

/// What a selected value must satisfy, with XPath 1.0's existential semantics: the condition
/// holds when ANY selected value (node, header) satisfies it.
#[derive(Debug, Clone)]
pub enum Test {
    /// At least one value is selected (`boolean(PATH)` for XPath).
    Exists,
    /// A selected value equals the string (`PATH = 'literal'`).
    Equals(String),
    /// A selected value matches the regular expression (unanchored, as `Regex::is_match`;
    /// anchor it with `^…$` for a whole-value match).
    Matches(regex::Regex),
}

impl Test {
    /// True when `value` satisfies the test (`Exists` holds for any value).
    pub fn accepts(&self, value: &str) -> bool {
        match self {
            Test::Exists => true,
            Test::Equals(s) => s == value,
            Test::Matches(re) => re.is_match(value),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_test_accepts_what_it_says() {
        assert!(Test::Exists.accepts(""));
        assert!(Test::Equals("IBM".into()).accepts("IBM"));
        assert!(!Test::Equals("IBM".into()).accepts("IBM "));
        let re = regex::Regex::new("^I.M$").map(Test::Matches);
        assert!(re
            .as_ref()
            .is_ok_and(|t| t.accepts("IBM") && !t.accepts("xIBM")));
    }
}
