package errfs

import (
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"syscall"

	"github.com/kdb-project/kdb/vfs"
)

// injected is an injected error that unwraps to an errno, so callers that
// test for EIO or ENOSPC see them.
type injected struct {
	msg   string
	errno syscall.Errno
}

func (e *injected) Error() string { return e.msg }
func (e *injected) Unwrap() error { return e.errno }

var (
	// ErrInjected is an injected I/O error: errors.Is(err, syscall.EIO).
	ErrInjected error = &injected{"errfs: injected I/O error", syscall.EIO}
	// ErrNoSpace is an injected full disk: errors.Is(err, syscall.ENOSPC).
	ErrNoSpace error = &injected{"errfs: injected no space left on device", syscall.ENOSPC}
)

// Rule decides whether an operation fails. n is the 1-based index of the
// operation among all operations the FS has seen (all kinds). A non-nil
// result fails the operation with that error (wrapped in an fs.PathError).
// For OpRename, path is the old name.
type Rule func(op vfs.Op, path string, n int) error

// FS is a vfs.FS that fails operations chosen by its rules.
type FS struct {
	hooked vfs.FS // under, intercepted by hook
	under  vfs.FS

	mu struct {
		sync.Mutex
		rules  []Rule
		count  int
		counts map[vfs.Op]int
	}
}

// dropper is implemented by vfs.MemFS files: DropUnsynced discards the
// file's pending writes.
type dropper interface{ DropUnsynced() }

// pathDropper is implemented by *vfs.MemFS.
type pathDropper interface{ DropUnsynced(name string) }

// Wrap returns an FS that forwards to fsys and fails the operations the
// rules select. Files it opens are wrapped too.
func Wrap(fsys vfs.FS, rules ...Rule) *FS {
	f := &FS{under: fsys}
	f.mu.rules = append([]Rule(nil), rules...)
	f.mu.counts = make(map[vfs.Op]int)
	f.hooked = vfs.Intercept(fsys, f.hook)
	return f
}

func (f *FS) hook(e vfs.Event) error {
	err := f.check(e)
	if err == nil {
		return nil
	}
	if e.Op == vfs.OpSync {
		// A failed fsync may have dropped the dirty pages (Linux does).
		if d, ok := e.File.(dropper); ok {
			d.DropUnsynced()
		} else if d, ok := f.under.(pathDropper); ok {
			d.DropUnsynced(e.Path)
		}
	}
	return &fs.PathError{Op: e.Op.String(), Path: e.Path, Err: err}
}

func (f *FS) check(e vfs.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.count++
	f.mu.counts[e.Op]++
	// Every rule sees every operation, so that counting rules stay exact
	// when an earlier rule already fails it. The first error wins.
	var err error
	for _, r := range f.mu.rules {
		if rerr := r(e.Op, e.Path, f.mu.count); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

var _ vfs.FS = (*FS)(nil)

// OpenFile opens name on the wrapped FS; the file's operations are checked
// against the rules too.
func (f *FS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	return f.hooked.OpenFile(name, flag, perm)
}
func (f *FS) Remove(name string) error             { return f.hooked.Remove(name) }
func (f *FS) Rename(oldname, newname string) error { return f.hooked.Rename(oldname, newname) }
func (f *FS) MkdirAll(dir string, perm os.FileMode) error {
	return f.hooked.MkdirAll(dir, perm)
}
func (f *FS) ReadDir(dir string) ([]string, error)  { return f.hooked.ReadDir(dir) }
func (f *FS) Stat(name string) (int64, bool, error) { return f.hooked.Stat(name) }
func (f *FS) SyncDir(dir string) error              { return f.hooked.SyncDir(dir) }
func (f *FS) Lock(name string) (vfs.Locker, error)  { return f.hooked.Lock(name) }

// Count returns the number of operations seen so far, of all kinds,
// failed ones included.
func (f *FS) Count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.count
}

// CountOp returns the number of operations of kind op seen so far.
func (f *FS) CountOp(op vfs.Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.counts[op]
}

// AddRule adds a rule; it sees operations from now on.
func (f *FS) AddRule(r Rule) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.rules = append(f.mu.rules, r)
}

// String describes the counts, for test failure messages.
func (f *FS) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "errfs: %d ops", f.mu.count)
	for op := vfs.OpOpen; op <= vfs.OpStat; op++ {
		if c := f.mu.counts[op]; c > 0 {
			fmt.Fprintf(&b, " %s=%d", op, c)
		}
	}
	return b.String()
}

// counter is a rule-local count, safe when a Rule is shared between FSes.
type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) next() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return c.n
}

// OnNth fails the n-th operation of kind op (1-based, counted from when the
// rule was installed), once.
func OnNth(op vfs.Op, n int, err error) Rule {
	var c counter
	return func(o vfs.Op, _ string, _ int) error {
		if o == op && c.next() == n {
			return err
		}
		return nil
	}
}

// FromNth fails the n-th operation of kind op and every later one of that
// kind.
func FromNth(op vfs.Op, n int, err error) Rule {
	var c counter
	return func(o vfs.Op, _ string, _ int) error {
		if o == op && c.next() >= n {
			return err
		}
		return nil
	}
}

// OnIndex fails the operation whose FS-wide index is n, once.
func OnIndex(n int, err error) Rule {
	return func(_ vfs.Op, _ string, i int) error {
		if i == n {
			return err
		}
		return nil
	}
}

// FromIndex fails the operation whose FS-wide index is n and every later
// operation.
func FromIndex(n int, err error) Rule {
	return func(_ vfs.Op, _ string, i int) error {
		if i >= n {
			return err
		}
		return nil
	}
}

// OnPath applies r only to operations whose path contains substr; r does
// not see (and does not count) the others. For example
// OnPath("db.free", OnNth(vfs.OpSync, 1, ErrInjected)) fails the first sync
// of db.free.
func OnPath(substr string, r Rule) Rule {
	return func(op vfs.Op, path string, n int) error {
		if strings.Contains(path, substr) {
			return r(op, path, n)
		}
		return nil
	}
}
