//! Failover (to be written).
