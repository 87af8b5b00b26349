//go:build race

package index

// raceEnabled scales the default randomized tests down under the race
// detector, which slows them about tenfold.
const raceEnabled = true
