//go:build race

package broker_test

const raceEnabled = true
