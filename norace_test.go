//go:build !race

package kdb_test

const raceEnabled = false
