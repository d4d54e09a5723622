//! PostgreSQL journal (being written).
