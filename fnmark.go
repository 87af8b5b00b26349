//go:build amd64 || arm64

package kdb

// The mark of a transaction function's runner is its goroutine's g
// pointer, read from the thread-local slot (amd64) or the g register
// (arm64) in fnmark_*.s: a few nanoseconds, against 2.5 to 12 µs for the
// goroutine ID read from a stack trace and 1 to 3 µs for a gettid system
// call on the virtual machines we measure on. A g is reused only after
// its goroutine exits; the runner is alive while its mark is set, so no
// other goroutine has its g.

// getg returns the calling goroutine's g pointer.
func getg() uintptr

func enterMark() uint64 { return uint64(getg()) }

func leaveMark() {}

func currentMark() uint64 { return uint64(getg()) }

// viewMark is the mark a View registers (viewRegistry.marks), so that
// Close can tell it is called from inside one: here as cheap as any mark.
func viewMark() uint64 { return uint64(getg()) }
