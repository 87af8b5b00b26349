//go:build unix

package vfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// OS is the real file system: pwrite/pread, fdatasync, fallocate, flock,
// directory fsync and read-only shared mmap. Linux is the supported
// platform; other unix systems build (fsync instead of fdatasync, F_FULLFSYNC
// on darwin, no fallocate) so that developers can run the tests.
var OS FS = osFS{}

type osFS struct{}

var _ File = (*osFile)(nil)

// OpenFile opens name with os.OpenFile (O_CLOEXEC is implied). Every
// file of a store is a regular file: anything else at its name (a FIFO,
// whose open would block until a writer came, a device, a directory) is
// refused with ErrNotRegular before it is opened.
func (osFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	if err := checkRegular(name); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &osFile{f: f, name: name}, nil
}

// checkRegular refuses a name that exists and is not a regular file (after
// symbolic links).
func checkRegular(name string) error {
	st, err := os.Stat(name)
	if err != nil || st.Mode().IsRegular() {
		return nil // a missing file is OpenFile's to report or create
	}
	return &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w (%s)", ErrNotRegular, st.Mode().Type())}
}

func (osFS) Remove(name string) error             { return os.Remove(name) }
func (osFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }
func (osFS) MkdirAll(dir string, perm os.FileMode) error {
	return os.MkdirAll(dir, perm)
}

// ReadDir returns the entry names of dir, sorted.
func (osFS) ReadDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, nil
}

func (osFS) Stat(name string) (int64, bool, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return 0, false, err
	}
	return fi.Size(), fi.IsDir(), nil
}

// LType lstats name: its type bits, a symbolic link not followed.
func (osFS) LType(name string) (fs.FileMode, error) {
	fi, err := os.Lstat(name)
	if err != nil {
		return 0, err
	}
	return fi.Mode().Type(), nil
}

// SyncDir opens dir read-only and fsyncs it.
func (osFS) SyncDir(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	err = retryEINTR(func() error { return unix.Fsync(fd) })
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return &fs.PathError{Op: "fsync", Path: dir, Err: err}
	}
	return nil
}

// Lock opens (creating, 0600) name and takes flock(LOCK_EX|LOCK_NB) on it.
// flock locks belong to the open file description, so a second Lock in the
// same process conflicts too; the process keeps a table of the lock files
// (by device and inode) it holds, so that its ErrLocked says whether the
// holder is this process or another one.
func (osFS) Lock(name string) (Locker, error) {
	if err := checkRegular(name); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	return flockFile(f, name)
}

// LockDir takes flock(LOCK_EX|LOCK_NB) on the directory dir itself, opened
// read-only (never created): what LockStore adds to the lock file.
func (osFS) LockDir(dir string) (Locker, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err != nil || !st.IsDir() {
		_ = f.Close()
		if err == nil {
			err = &fs.PathError{Op: "lock", Path: dir, Err: syscall.ENOTDIR}
		}
		return nil, err
	}
	return flockFile(f, dir)
}

// flockFile takes the exclusive flock on f, open as name, and records it
// in the table of locks this process holds; it closes f if it fails.
func flockFile(f *os.File, name string) (Locker, error) {
	var key lockKey
	err := control(f, func(fd int) error {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		key = lockKey{dev: uint64(st.Dev), ino: uint64(st.Ino)}
		return nil
	})
	if err != nil {
		_ = f.Close()
		return nil, &fs.PathError{Op: "fstat", Path: name, Err: err}
	}
	heldLocks.Lock()
	defer heldLocks.Unlock()
	if heldLocks.m[key] {
		_ = f.Close()
		return nil, fmt.Errorf("%w: %s: held by this process (another handle of it has the store open)", ErrLocked, name)
	}
	err = control(f, func(fd int) error {
		return retryEINTR(func() error { return unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) })
	})
	if err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s: held by another process", ErrLocked, name)
		}
		return nil, &fs.PathError{Op: "flock", Path: name, Err: err}
	}
	heldLocks.m[key] = true
	return &osLock{f: f, key: key}, nil
}

// lockKey identifies a lock file: its device and inode.
type lockKey struct{ dev, ino uint64 }

// heldLocks is the table of the lock files this process holds.
var heldLocks = struct {
	sync.Mutex
	m map[lockKey]bool
}{m: map[lockKey]bool{}}

type osLock struct {
	once sync.Once
	f    *os.File
	key  lockKey
	err  error
}

// Close releases the lock with flock(LOCK_UN) and then closes the file.
// Closing alone is not enough: a child forked by any goroutine of this
// process holds a copy of the descriptor until its exec closes it, and
// the flock lives as long as any copy of the open file description does,
// so a reopen right after Close would find the store locked "by another
// process". LOCK_UN releases the lock for every copy at once.
func (l *osLock) Close() error {
	l.once.Do(func() {
		heldLocks.Lock()
		defer heldLocks.Unlock()
		delete(heldLocks.m, l.key)
		err := control(l.f, func(fd int) error {
			return retryEINTR(func() error { return unix.Flock(fd, unix.LOCK_UN) })
		})
		if err != nil {
			err = &fs.PathError{Op: "flock", Path: l.f.Name(), Err: err}
		}
		if cerr := l.f.Close(); err == nil {
			err = cerr
		}
		l.err = err
	})
	return l.err
}

// osFile is a File on the real file system.
//
// Invariants:
//   - Once mu.err is set (a failed write or sync), WriteAt, Sync, Truncate
//     and Allocate return it: the kernel may have dropped the dirty pages,
//     and a later fdatasync could report success without writing them.
type osFile struct {
	f    *os.File
	name string

	mu struct {
		sync.Mutex
		err error
	}
}

func (f *osFile) sticky() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.err
}

func (f *osFile) fail(err error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.err == nil && !errors.Is(err, os.ErrClosed) {
		f.mu.err = err
	}
	return err
}

// control runs fn with f's descriptor, keeping it open meanwhile.
func control(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

func retryEINTR(fn func() error) error {
	for {
		if err := fn(); err != unix.EINTR {
			return err
		}
	}
}

func (f *osFile) ReadAt(p []byte, off int64) (int, error) { return f.f.ReadAt(p, off) }

// WriteAt is pwrite (looping over short writes). Not durable until Sync.
// An error is sticky.
func (f *osFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.sticky(); err != nil {
		return 0, err
	}
	n, err := f.f.WriteAt(p, off)
	if err != nil {
		return n, f.fail(err)
	}
	return n, nil
}

// Sync is fdatasync. An error is sticky: the file must not be trusted again.
func (f *osFile) Sync() error {
	if err := f.sticky(); err != nil {
		return err
	}
	err := control(f.f, func(fd int) error { return retryEINTR(func() error { return fdatasync(fd) }) })
	if err != nil {
		return f.fail(&fs.PathError{Op: "fdatasync", Path: f.name, Err: err})
	}
	return nil
}

// Truncate sets the size. Not durable until Sync.
func (f *osFile) Truncate(size int64) error {
	if err := f.sticky(); err != nil {
		return err
	}
	if err := f.f.Truncate(size); err != nil {
		return f.fail(err)
	}
	return nil
}

// Allocate is fallocate(mode 0); where the file system does not support it,
// it grows the file with ftruncate (new bytes read as zero, but the space is
// not reserved). Not durable until Sync.
func (f *osFile) Allocate(off, n int64) error {
	if err := f.sticky(); err != nil {
		return err
	}
	err := control(f.f, func(fd int) error {
		return retryEINTR(func() error { return fallocate(fd, off, n) })
	})
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		var size int64
		if size, err = f.Size(); err == nil && size < off+n {
			err = f.f.Truncate(off + n)
		}
	}
	if err != nil {
		return f.fail(&fs.PathError{Op: "fallocate", Path: f.name, Err: err})
	}
	return nil
}

func (f *osFile) Size() (int64, error) {
	fi, err := f.f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// Mmap maps [0, size) PROT_READ, MAP_SHARED. Size 0 gives nil, nil.
func (f *osFile) Mmap(size int64) ([]byte, error) {
	if size == 0 {
		return nil, nil
	}
	if size < 0 || size != int64(int(size)) {
		return nil, &fs.PathError{Op: "mmap", Path: f.name, Err: syscall.EINVAL}
	}
	var b []byte
	err := control(f.f, func(fd int) error {
		var err error
		b, err = unix.Mmap(fd, 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
		return err
	})
	if err != nil {
		return nil, &fs.PathError{Op: "mmap", Path: f.name, Err: err}
	}
	return b, nil
}

func (f *osFile) Munmap(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if err := unix.Munmap(b); err != nil {
		return &fs.PathError{Op: "munmap", Path: f.name, Err: err}
	}
	return nil
}

func (f *osFile) Name() string { return f.name }

// Close closes the descriptor. It does not sync.
func (f *osFile) Close() error { return f.f.Close() }
