//! Scenario tests (placeholder filled below).
