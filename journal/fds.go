package journal

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/kdb-project/kdb/internal/invariants"
	"github.com/kdb-project/kdb/vfs"
)

// defaultMaxOpenSegments returns Options.MaxOpenSegments' default: 64, or
// an eighth of the process's descriptor limit if that is lower (at least
// 4), so that a program run under a low limit (ulimit -n) still opens a
// journal of any length. Under the kdb_invariants build tag (the tests CI
// runs) it is 2, so that every test with more than a few segments closes
// and reopens them.
func defaultMaxOpenSegments() int {
	if invariants.Enabled {
		return 2
	}
	n := 64
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur/8 < uint64(n) {
		n = max(int(lim.Cur/8), 4)
	}
	return n
}

// fdCache bounds the descriptors held by sealed segments (every segment but
// the last): a sealed segment is closed when more than max of them are
// open and reopened, read-only, by its next read. The last segment (the
// writer's) is never closed before it is sealed.
//
// Eviction is the clock algorithm: a read marks its segment used (an
// atomic flag, no lock on the read path), and the hand gives a used segment
// a second chance before it closes one.
//
// Invariants:
//   - A segment is in open at most once (inCache, guarded by mu), and only
//     while it is sealed and not the journal's last segment.
//   - A segment's f is closed and set to nil only under its rw lock held
//     for writing; mu is never held while a segment's rw is taken.
type fdCache struct {
	fsys vfs.FS
	max  int

	mu   sync.Mutex
	open []*segment
	hand int

	reopens atomic.Int64
	closes  atomic.Int64
}

func newFdCache(fsys vfs.FS, max int) *fdCache {
	return &fdCache{fsys: fsys, max: max}
}

// add makes s, a sealed segment that is not the last one, closable, and
// closes others while more than max are open.
func (c *fdCache) add(s *segment) {
	if c == nil {
		return
	}
	var victims []*segment
	c.mu.Lock()
	if !s.inCache {
		s.inCache = true
		c.open = append(c.open, s)
	}
	for len(c.open) > c.max {
		if c.hand >= len(c.open) {
			c.hand = 0
		}
		v := c.open[c.hand]
		if v.used.Load() && v != s {
			v.used.Store(false)
			c.hand++
			continue
		}
		if v == s && len(c.open) > 1 {
			c.hand++
			continue
		}
		c.removeAtLocked(c.hand)
		victims = append(victims, v)
	}
	c.mu.Unlock()
	for _, v := range victims {
		v.rw.Lock()
		if v.f != nil && !v.gone {
			_ = v.f.Close() // read-only use: nothing to lose
			v.f = nil
			c.closes.Add(1)
		}
		v.rw.Unlock()
	}
}

// pin takes s out of the cache (it became the last segment: the writer
// will write it) and opens it again if it was closed, with flag.
func (c *fdCache) pin(s *segment, flag int) error {
	if c == nil {
		return nil
	}
	c.forget(s)
	s.rw.Lock()
	defer s.rw.Unlock()
	if s.f != nil || s.gone {
		return nil
	}
	f, err := c.fsys.OpenFile(s.name, flag, 0)
	if err != nil {
		return reopenErr(s, err)
	}
	s.f = f
	return nil
}

// forget takes s out of the cache (removed, or the journal closed).
func (c *fdCache) forget(s *segment) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !s.inCache {
		return
	}
	for i, o := range c.open {
		if o == s {
			c.removeAtLocked(i)
			return
		}
	}
}

func (c *fdCache) removeAtLocked(i int) {
	s := c.open[i]
	s.inCache = false
	c.open = append(c.open[:i], c.open[i+1:]...)
	if c.hand > i {
		c.hand--
	}
}

// reopenErr is the error of a segment that could not be opened again: a
// file gone from under the store is damage (ErrCorrupt, naming it); any
// other failure (out of descriptors) is an I/O error.
func reopenErr(s *segment, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s: the segment's file is gone from the store's directory (%v)", ErrCorrupt, s.id, err)
	}
	return fmt.Errorf("journal: reopen %s: %w", s.id, err)
}

// readClosed serves readAt for a segment whose descriptor the cache
// closed: it opens the file again (read-only: only sealed segments are
// closed), reads, and gives the segment back to the cache.
func (s *segment) readClosed(p []byte, off int64) error {
	s.rw.Lock()
	if s.gone {
		s.rw.Unlock()
		return fmt.Errorf("%w: %s was removed", ErrNotFound, s.id)
	}
	if s.f == nil {
		f, err := s.fds.fsys.OpenFile(s.name, os.O_RDONLY, 0)
		if err != nil {
			s.rw.Unlock()
			if errors.Is(err, fs.ErrNotExist) && s.removing.Load() {
				return fmt.Errorf("%w: %s was removed", ErrNotFound, s.id)
			}
			return reopenErr(s, err)
		}
		s.f = f
		s.fds.reopens.Add(1)
	}
	err := s.readLocked(p, off)
	s.rw.Unlock()
	s.used.Store(true)
	s.fds.add(s)
	return err
}
