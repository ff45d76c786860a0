//! UTC days of nanosecond timestamps, and their `YYYY-MM-DD` names.

pub const NS_PER_DAY: i64 = 86_400 * 1_000_000_000;

/// Days since 1970-01-01; floor division, so the last nanoseconds before 1970 are on 1969-12-31.
pub fn day_of(ts_ns: i64) -> i64 {
    ts_ns.div_euclid(NS_PER_DAY)
}

/// The proleptic Gregorian date of a day number (Howard Hinnant's `civil_from_days`).
pub fn date_name(day: i64) -> String {
    let z = day + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_are_named_as_the_calendar_names_them() {
        assert_eq!(date_name(0), "1970-01-01");
        assert_eq!(date_name(-1), "1969-12-31");
        assert_eq!(date_name(11_016), "2000-02-29");
        assert_eq!(date_name(20_783), "2026-11-26");
        assert_eq!(day_of(-1), -1);
        assert_eq!(day_of(NS_PER_DAY - 1), 0);
        assert_eq!(day_of(NS_PER_DAY), 1);
    }
}
