//! SQLite journal (being written).
