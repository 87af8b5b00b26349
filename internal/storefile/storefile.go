// Package storefile names the files a store's directory holds.
package storefile

import (
	"strconv"
	"strings"
)

// Is reports whether name is one a store's directory holds or may hold:
// the page file's (db.data, db.redo, db.free, db.free.prev), the lock and
// the journal's segments (db-N.log), with the temporary names they are
// written under (.tmp) and the copies kdbtool repair saves of them
// (.broken, .broken.N, and .broken.tmp left by a killed repair).
func Is(name string) bool {
	name = strings.TrimSuffix(name, ".tmp")
	if i := strings.LastIndex(name, ".broken."); i >= 0 {
		if _, err := strconv.ParseUint(name[i+len(".broken."):], 10, 64); err == nil {
			name = name[:i]
		}
	}
	name = strings.TrimSuffix(strings.TrimSuffix(name, ".broken"), ".tmp")
	switch name {
	case "db.data", "db.redo", "db.free", "db.free.prev", "lock":
		return true
	}
	// A journal segment, db-<N>.log, N canonical decimal from 1 (FORMAT.md
	// §4.1; the journal package parses it the same way, and is above
	// this one).
	num, ok := strings.CutPrefix(name, "db-")
	num, ok2 := strings.CutSuffix(num, ".log")
	if !ok || !ok2 {
		return false
	}
	n, err := strconv.ParseUint(num, 10, 32)
	return err == nil && n > 0 && strconv.FormatUint(n, 10) == num
}
