package kdb

// maybeCompact is a stub replaced below.
func (db *DB) maybeCompact() {}
