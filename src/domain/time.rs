use chrono::{DateTime, SecondsFormat, TimeZone, Utc};

/// A point in time as the store keeps it: microseconds since the Unix epoch, UTC.
/// Both backends store the same integer, so ordering and equality never differ between them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    pub fn now() -> Self {
        Self(Utc::now().timestamp_micros())
    }

    pub fn from_micros(micros: i64) -> Self {
        Self(micros)
    }

    pub fn as_micros(self) -> i64 {
        self.0
    }

    pub fn to_datetime(self) -> DateTime<Utc> {
        Utc.timestamp_micros(self.0).single().unwrap_or_default()
    }

    /// RFC 3339 in UTC with millisecond precision, e.g. `2026-11-22T08:00:00.000Z`.
    pub fn to_rfc3339(self) -> String {
        self.to_datetime().to_rfc3339_opts(SecondsFormat::Millis, true)
    }

    pub fn parse_rfc3339(value: &str) -> Option<Self> {
        DateTime::parse_from_rfc3339(value).ok().map(|t| Self(t.with_timezone(&Utc).timestamp_micros()))
    }
}

impl serde::Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_rfc3339())
    }
}
