package vfs

import (
	"errors"
	"os"
)

// Op names a kind of file-system operation. Fault injection (errfs) and crash
// tests select operations by Op.
type Op uint8

const (
	OpOpen     Op = iota + 1 // FS.OpenFile
	OpRead                   // File.ReadAt
	OpWrite                  // File.WriteAt
	OpSync                   // File.Sync (fdatasync)
	OpTruncate               // File.Truncate
	OpAllocate               // File.Allocate (fallocate)
	OpMmap                   // File.Mmap
	OpClose                  // File.Close
	OpRemove                 // FS.Remove
	OpRename                 // FS.Rename
	OpMkdir                  // FS.MkdirAll
	OpSyncDir                // FS.SyncDir
	OpLock                   // FS.Lock
	OpReadDir                // FS.ReadDir
	OpStat                   // FS.Stat
)

var opNames = [...]string{
	OpOpen: "open", OpRead: "read", OpWrite: "write", OpSync: "sync",
	OpTruncate: "truncate", OpAllocate: "allocate", OpMmap: "mmap", OpClose: "close",
	OpRemove: "remove", OpRename: "rename", OpMkdir: "mkdir", OpSyncDir: "syncdir",
	OpLock: "lock", OpReadDir: "readdir", OpStat: "stat",
}

func (o Op) String() string {
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return "op?"
}

// Mutating reports whether the operation can change what a crash image
// contains. Crash-at-every-write loops count these.
func (o Op) Mutating() bool {
	switch o {
	case OpWrite, OpSync, OpTruncate, OpAllocate, OpRemove, OpRename, OpMkdir, OpSyncDir:
		return true
	}
	return false
}

// Errors.
var (
	// ErrLocked is returned by Lock when another holder has the lock; the
	// message says whether it is this process or another one.
	ErrLocked = errors.New("vfs: locked")
	// ErrMmapUnsupported is returned by Mmap when the FS cannot map files;
	// callers fall back to ReadAt.
	ErrMmapUnsupported = errors.New("vfs: mmap not supported")
	// ErrNotRegular is returned (in a *fs.PathError) by OS's OpenFile and
	// Lock for a name that exists and is not a regular file after symbolic
	// links (a FIFO, whose open would block; a device; a directory).
	ErrNotRegular = errors.New("vfs: not a regular file")
)

// FS is the one seam through which the engine touches files. Paths are
// ordinary OS-style paths (the in-memory FS cleans them with path/filepath).
//
// Durability contract (what a crash keeps), which MemFS enforces and OS
// provides on Linux:
//   - Bytes written with WriteAt survive a crash only after File.Sync returns nil.
//   - A created, renamed or removed name survives only after SyncDir of its
//     parent directory returns nil.
//   - A failed Sync may have dropped the pending writes; the caller must treat
//     the file as failed and never retry.
type FS interface {
	// OpenFile opens or creates name (flags as os.O_*). Created files get perm.
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// Remove removes a file or an empty directory. Not durable until SyncDir.
	Remove(name string) error
	// Rename atomically renames oldname to newname, replacing newname.
	// Not durable until SyncDir of the parent directory.
	Rename(oldname, newname string) error
	// MkdirAll creates dir and its parents. Not durable until SyncDir of each parent.
	MkdirAll(dir string, perm os.FileMode) error
	// ReadDir returns the names (not paths) of the entries of dir, sorted.
	ReadDir(dir string) ([]string, error)
	// Stat returns the size of name and whether it is a directory.
	// A missing file gives an error satisfying errors.Is(err, fs.ErrNotExist).
	Stat(name string) (size int64, isDir bool, err error)
	// SyncDir fsyncs the directory itself, making entry changes durable.
	SyncDir(dir string) error
	// Lock takes an exclusive lock on name (created if missing, perm 0600),
	// failing at once with ErrLocked if it is held elsewhere. Close releases it.
	Lock(name string) (Locker, error)
}

// DirLocker is implemented by file systems that can lock a directory
// itself (OS: flock on the directory, opened read-only), failing at once
// with ErrLocked if it is held elsewhere. LockStore uses it.
type DirLocker interface {
	LockDir(dir string) (Locker, error)
}

// TypeStater is implemented by file systems that can say what a name is
// without following a symbolic link at it (OS: lstat): its type bits
// (os.ModeDir, os.ModeSymlink, os.ModeNamedPipe, ...; 0 for a regular
// file). LType uses it.
type TypeStater interface {
	LType(name string) (os.FileMode, error)
}

// LType returns the type bits of name itself, a symbolic link not followed
// (0 for a regular file), where fsys is a TypeStater (OS); another FS (the
// in-memory one, which has neither links nor FIFOs, a test's hooks) says
// only whether it is a directory (os.ModeDir), by Stat. A missing name
// gives an error satisfying errors.Is(err, fs.ErrNotExist).
func LType(fsys FS, name string) (os.FileMode, error) {
	if ts, ok := fsys.(TypeStater); ok {
		return ts.LType(name)
	}
	_, isDir, err := fsys.Stat(name)
	if err != nil || !isDir {
		return 0, err
	}
	return os.ModeDir, nil
}

// Locker is a held lock.
type Locker interface {
	Close() error
}

// WritebackStarter is implemented by files that can start writing a range
// of their data back to the device without waiting for it (Linux:
// sync_file_range with SYNC_FILE_RANGE_WRITE only). It makes nothing
// durable and consumes no write-back error (the next Sync reports those):
// a hint that lets the device work while the caller does something else
// before its Sync.
type WritebackStarter interface {
	StartWriteback(off, n int64) error
}

// File is an open file.
//
// ReadAt, WriteAt and Mmap'd reads may run concurrently with each other on
// different ranges; the caller orders overlapping ones.
type File interface {
	// ReadAt follows io.ReaderAt: a short read returns io.EOF.
	ReadAt(p []byte, off int64) (int, error)
	// WriteAt follows io.WriterAt (pwrite). Not durable until Sync.
	WriteAt(p []byte, off int64) (int, error)
	// Sync makes the file's data durable (fdatasync). On error, pending writes
	// may be lost and the caller must not retry.
	Sync() error
	// Truncate sets the file's size. Not durable until Sync.
	Truncate(size int64) error
	// Allocate reserves space for [off, off+n) (fallocate with KEEP_SIZE unset:
	// the file grows to at least off+n, new bytes read as zero).
	// Not durable until Sync.
	Allocate(off, n int64) error
	// Size returns the current size of the file.
	Size() (int64, error)
	// Mmap maps [0, size) read-only and returns the bytes, or
	// ErrMmapUnsupported. The mapping stays valid until Munmap, even if the
	// file grows or is written (writes through WriteAt become visible in it
	// on the OS FS). Reading past the end of the file through it faults, so
	// callers map only what exists.
	Mmap(size int64) ([]byte, error)
	// Munmap releases a mapping returned by Mmap.
	Munmap(b []byte) error
	// Name returns the path the file was opened with.
	Name() string
	// Close closes the file. It does not sync.
	Close() error
}
