// Replaced by the versioned ABI shims.
