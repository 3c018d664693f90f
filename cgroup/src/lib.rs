//! Pod and QoS cgroup hierarchy (`kubepods/{burstable,besteffort}/pod<uid>`)
//! and cgroup stats readers, for cgroup v1 and v2.
//!
//! Not implemented yet: arrives with the agent and observability issues.
