// Package recovery opens the three parts of a kdb store after a clean or an
// unclean shutdown and brings them back to one consistent state: the opening
// algorithm docs/DESIGN.md describes ("Recovery (recovery.Run)").
//
// It owns the order of the steps and the Report; what a journal record means
// is the caller's (Options.Apply). It must not know about the root package's
// API or record formats.
//
// Concurrency: Run is called once, before the store is served. Replay runs
// each chunk's index Update on a goroutine of its own (replay.go); none
// outlives Run.
//
// Format: it writes nothing of its own; docs/FORMAT.md covers the files it
// reads.
package recovery
