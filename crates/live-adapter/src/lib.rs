//! Live driver for handoff-core workers on threads and processes (issue #6: not built yet; nothing here).
