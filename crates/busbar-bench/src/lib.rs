//! busbar-bench
