// Package invariants gates costly self-checks behind the kdb_invariants build
// tag and reports programmer errors by panicking. Bytes read from disk must
// never reach Assertf: they are checked and turned into ErrCorrupt instead.
package invariants

import "fmt"

// Assertf panics with the formatted message if cond is false. It is cheap
// enough to call in every build; guard costly conditions with Enabled.
func Assertf(cond bool, format string, args ...any) {
	if !cond {
		panic(fmt.Sprintf("kdb: invariant violated: "+format, args...))
	}
}
