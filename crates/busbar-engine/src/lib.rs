//! busbar-engine
