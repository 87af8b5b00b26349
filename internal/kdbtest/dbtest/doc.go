// Package dbtest holds test support for the root package: a deterministic
// mixed workload, the model it must match, and helpers that open a store,
// compare it with the model and run Check.
//
// It imports the root package and internal/* only; only tests import it.
package dbtest
