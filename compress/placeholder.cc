// Replaced by the first compress/ sources.
