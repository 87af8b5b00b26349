package kdbtest

import (
	"errors"
	"sync"

	"github.com/kdb-project/kdb/vfs"
)

// ErrCrashed is returned by every operation at and after the simulated
// power loss of a Crasher.
var ErrCrashed = errors.New("kdbtest: crashed (simulated power loss)")

// Crasher runs a workload on a MemFS and simulates a power loss at its k-th
// mutating operation.
//
// Invariants:
//   - mu.image != nil iff mu.crashed.
//   - mu.mutations counts mutating operations up to and including the one
//     that crashed; nothing is counted after the crash.
//
// A Crasher is safe for concurrent use.
type Crasher struct {
	mem *vfs.MemFS
	k   int
	o   vfs.CrashOptions
	fs  vfs.FS

	process bool // the image is a process crash (vfs.MemFS.ProcessCrashClone)

	mu struct {
		sync.Mutex
		mutations int
		crashed   bool
		image     *vfs.MemFS
	}
}

// CrashAt wraps mem so that the k-th mutating operation (vfs.Op.Mutating,
// 1-based, counted across all files and the FS) first takes
// mem.CrashClone(o) as the crash image, then fails, and so does every later
// operation of any kind, with ErrCrashed. k < 1 never crashes.
func CrashAt(mem *vfs.MemFS, k int, o vfs.CrashOptions) *Crasher {
	c := &Crasher{mem: mem, k: k, o: o}
	c.fs = newSerialFS(vfs.Intercept(mem, c.hook))
	return c
}

// ProcessCrashAt is CrashAt for a process crash: the image taken at the
// k-th mutating operation keeps every earlier write, synced or not
// (mem.ProcessCrashClone), as the kernel does when a process dies. Recover
// from it, then take its CrashClone to model a power loss after recovery.
// Without a crash, Image returns mem.ProcessCrashClone() taken at the call.
func ProcessCrashAt(mem *vfs.MemFS, k int) *Crasher {
	c := &Crasher{mem: mem, k: k, process: true}
	c.fs = newSerialFS(vfs.Intercept(mem, c.hook))
	return c
}

// imageLocked takes the crash image of the kind c models.
//
// The caller must hold c.mu.
func (c *Crasher) imageLocked() *vfs.MemFS {
	if c.process {
		return c.mem.ProcessCrashClone()
	}
	return c.mem.CrashClone(c.o)
}

func (c *Crasher) hook(e vfs.Event) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.crashed {
		return ErrCrashed
	}
	if !e.Op.Mutating() {
		return nil
	}
	c.mu.mutations++
	if c.mu.mutations == c.k {
		c.mu.image = c.imageLocked()
		c.mu.crashed = true
		return ErrCrashed
	}
	return nil
}

// FS returns the file system the workload must use.
func (c *Crasher) FS() vfs.FS { return c.fs }

// Crashed reports whether the power loss has happened.
func (c *Crasher) Crashed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.crashed
}

// Image returns the crash image: the one taken at the k-th mutating
// operation if it happened, else mem.CrashClone(o) taken now (a power loss
// at the end of the workload). Each call without a crash takes a fresh
// image.
func (c *Crasher) Image() *vfs.MemFS {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.crashed {
		return c.mu.image
	}
	return c.imageLocked()
}

// Mutations returns the number of mutating operations seen, the crashing
// one included.
func (c *Crasher) Mutations() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.mutations
}
