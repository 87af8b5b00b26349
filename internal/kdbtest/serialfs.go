package kdbtest

import (
	"os"
	"sync"

	"github.com/kdb-project/kdb/vfs"
)

// serialFS runs every mutating operation of the FS it wraps, and of the
// files it opens, under one mutex.
//
// A Crasher takes its crash image in a hook that runs before each
// operation. Without serialFS, with two goroutines doing mutating
// operations, the image for operation k could be taken while operation k-1,
// already let through the hook, had not yet reached the MemFS: a Sync that
// returns success after the image was taken, so the image would lack writes
// the caller was told are durable. Wrapped outside the hook, serialFS makes
// "hook and operation" atomic with respect to other mutating operations, so
// the image reflects every operation that returned before it.
type serialFS struct {
	mu *sync.Mutex
	fs vfs.FS
}

func newSerialFS(fs vfs.FS) vfs.FS { return serialFS{mu: new(sync.Mutex), fs: fs} }

func (s serialFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := s.fs.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return serialFile{File: f, mu: s.mu}, nil
}

func (s serialFS) Remove(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fs.Remove(name)
}

func (s serialFS) Rename(oldname, newname string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fs.Rename(oldname, newname)
}

func (s serialFS) MkdirAll(dir string, perm os.FileMode) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fs.MkdirAll(dir, perm)
}

func (s serialFS) SyncDir(dir string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fs.SyncDir(dir)
}

func (s serialFS) ReadDir(dir string) ([]string, error)      { return s.fs.ReadDir(dir) }
func (s serialFS) Stat(name string) (int64, bool, error)     { return s.fs.Stat(name) }
func (s serialFS) Lock(name string) (vfs.Locker, error)      { return s.fs.Lock(name) }
func (f serialFile) ReadAt(p []byte, off int64) (int, error) { return f.File.ReadAt(p, off) }
func (f serialFile) Size() (int64, error)                    { return f.File.Size() }
func (f serialFile) Name() string                            { return f.File.Name() }
func (f serialFile) Mmap(size int64) ([]byte, error)         { return f.File.Mmap(size) }
func (f serialFile) Munmap(b []byte) error                   { return f.File.Munmap(b) }
func (f serialFile) Close() error                            { return f.File.Close() }
func (f serialFile) WriteAt(p []byte, off int64) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.File.WriteAt(p, off)
}
func (f serialFile) Sync() error { f.mu.Lock(); defer f.mu.Unlock(); return f.File.Sync() }
func (f serialFile) Truncate(size int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.File.Truncate(size)
}
func (f serialFile) Allocate(off, n int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.File.Allocate(off, n)
}

type serialFile struct {
	vfs.File
	mu *sync.Mutex
}

// Serialize returns fs with every mutating operation, of the FS and of the
// files opened through it, run under one mutex. Wrap it around a
// vfs.Intercept whose hook takes crash images while several goroutines
// write: each image then reflects exactly the operations that returned
// before it (see serialFS).
func Serialize(fs vfs.FS) vfs.FS { return newSerialFS(fs) }
