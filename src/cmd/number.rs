//! Value parsers for numeric flags: every float flag of every command goes through one of
//! these, so `-1`, `NaN` and `inf` are refused by clap with the flag's name
//! before anything runs.

/// A finite number ≥ 0 (prices, sizes, rates, durations that may be zero).
pub fn non_negative(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!("expected a finite number ≥ 0, found {text:?}")),
    }
}

/// A finite number > 0 (durations, tick lengths, on-demand prices).
pub fn positive(text: &str) -> Result<f64, String> {
    match non_negative(text) {
        Ok(x) if x > 0.0 => Ok(x),
        _ => Err(format!("expected a finite number > 0, found {text:?}")),
    }
}

/// A duration > 0: seconds, or with a unit as in job specs (`90s`, `15m`, `2h`).
pub fn duration(text: &str) -> Result<f64, String> {
    if let Ok(x) = positive(text) {
        return Ok(x);
    }
    tern_cloud::parse_duration(text.trim())
        .filter(|s| *s > 0)
        .map(|s| s as f64)
        .ok_or_else(|| format!("expected a duration like \"15m\" or seconds > 0, found {text:?}"))
}

/// A fraction from 0 to 1 (fault rates).
pub fn fraction(text: &str) -> Result<f64, String> {
    match non_negative(text) {
        Ok(x) if x <= 1.0 => Ok(x),
        _ => Err(format!("expected a fraction from 0 to 1, found {text:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonsense_numbers_are_refused() {
        for bad in ["-1", "NaN", "nan", "inf", "-inf", "1e999", "x", ""] {
            assert!(non_negative(bad).is_err(), "{bad}");
            assert!(positive(bad).is_err(), "{bad}");
        }
        assert_eq!(non_negative("0"), Ok(0.0));
        assert!(positive("0").is_err());
        assert_eq!(positive("0.30"), Ok(0.3));
        assert_eq!(fraction("0.1"), Ok(0.1));
        assert!(fraction("1.5").is_err());
        assert!(fraction("NaN").is_err());
    }
}
