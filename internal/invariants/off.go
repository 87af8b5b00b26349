//go:build !kdb_invariants

package invariants

// Enabled reports whether costly invariant checks run (build tag kdb_invariants).
const Enabled = false
