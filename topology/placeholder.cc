// Replaced by the first topology/ sources.
