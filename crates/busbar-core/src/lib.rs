//! busbar-core
