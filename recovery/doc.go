// Package recovery opens the three parts of a kdb store after a clean or an
// unclean shutdown and brings them back to one consistent state: the whole
// opening algorithm of docs/DESIGN.md ("Opening and recovery").
//
// It owns every step and its order: creating the directory and taking the
// lock file (ErrLocked), the checks that belong before replay (a lost page
// file is ErrCorrupt), opening the page file, the index and the journal,
// the replay position (ReplayPosition, from the checkpoint's meta), the
// replay, the decision whether a recovery checkpoint is due and whether it
// runs before serving, and the Report. What a journal record means is the
// caller's (Options.Apply), and so are the mechanics of a checkpoint
// (Options.Checkpoint) and taking the opened State over
// (Options.Recovered). It must not know about the root package's API or
// record formats, and does not import it.
//
// Concurrency: Run is called once, before the store is served. Replay runs
// each chunk's index Update on a goroutine of its own (replay.go); none
// outlives Run.
//
// Format: it writes nothing of its own (the lock file holds no bytes);
// docs/FORMAT.md covers the files it reads.
package recovery
