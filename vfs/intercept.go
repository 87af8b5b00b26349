package vfs

import (
	"os"
)

// Event describes one operation about to run on an intercepted FS.
type Event struct {
	Op Op
	// Path is the name the operation is about: the file's Name() for file
	// operations, the old name for OpRename.
	Path string
	// NewPath is the new name for OpRename, empty otherwise.
	NewPath string
	// File is the underlying file for file operations (OpRead, OpWrite,
	// OpSync, OpTruncate, OpAllocate, OpMmap, OpClose), nil otherwise.
	File File
}

// Hook is called before each operation on an intercepted FS. If it returns
// an error, the operation does not run and that error is returned — except
// OpClose, where the underlying file is closed anyway (as close(2) releases
// the descriptor even when it reports an error).
type Hook func(e Event) error

// Intercept returns an FS that calls hook before every operation on fsys
// and on the files opened through it. It counts nothing and holds no lock
// of its own; fault injection (errfs) and crash tests (kdbtest) build on it.
// File.Size, File.Name, File.Munmap and Locker.Close are not operations and
// pass straight through.
func Intercept(fsys FS, hook Hook) FS { return &hookFS{fs: fsys, hook: hook} }

type hookFS struct {
	fs   FS
	hook Hook
}

type hookFile struct {
	f    File
	hook Hook
}

func (h *hookFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	if err := h.hook(Event{Op: OpOpen, Path: name}); err != nil {
		return nil, err
	}
	f, err := h.fs.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &hookFile{f: f, hook: h.hook}, nil
}

func (h *hookFS) Remove(name string) error {
	if err := h.hook(Event{Op: OpRemove, Path: name}); err != nil {
		return err
	}
	return h.fs.Remove(name)
}

func (h *hookFS) Rename(oldname, newname string) error {
	if err := h.hook(Event{Op: OpRename, Path: oldname, NewPath: newname}); err != nil {
		return err
	}
	return h.fs.Rename(oldname, newname)
}

func (h *hookFS) MkdirAll(dir string, perm os.FileMode) error {
	if err := h.hook(Event{Op: OpMkdir, Path: dir}); err != nil {
		return err
	}
	return h.fs.MkdirAll(dir, perm)
}

func (h *hookFS) ReadDir(dir string) ([]string, error) {
	if err := h.hook(Event{Op: OpReadDir, Path: dir}); err != nil {
		return nil, err
	}
	return h.fs.ReadDir(dir)
}

func (h *hookFS) Stat(name string) (int64, bool, error) {
	if err := h.hook(Event{Op: OpStat, Path: name}); err != nil {
		return 0, false, err
	}
	return h.fs.Stat(name)
}

func (h *hookFS) SyncDir(dir string) error {
	if err := h.hook(Event{Op: OpSyncDir, Path: dir}); err != nil {
		return err
	}
	return h.fs.SyncDir(dir)
}

func (h *hookFS) Lock(name string) (Locker, error) {
	if err := h.hook(Event{Op: OpLock, Path: name}); err != nil {
		return nil, err
	}
	return h.fs.Lock(name)
}

func (f *hookFile) ev(op Op) Event { return Event{Op: op, Path: f.f.Name(), File: f.f} }

func (f *hookFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.hook(f.ev(OpRead)); err != nil {
		return 0, err
	}
	return f.f.ReadAt(p, off)
}

func (f *hookFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.hook(f.ev(OpWrite)); err != nil {
		return 0, err
	}
	return f.f.WriteAt(p, off)
}

func (f *hookFile) Sync() error {
	if err := f.hook(f.ev(OpSync)); err != nil {
		return err
	}
	return f.f.Sync()
}

func (f *hookFile) Truncate(size int64) error {
	if err := f.hook(f.ev(OpTruncate)); err != nil {
		return err
	}
	return f.f.Truncate(size)
}

func (f *hookFile) Allocate(off, n int64) error {
	if err := f.hook(f.ev(OpAllocate)); err != nil {
		return err
	}
	return f.f.Allocate(off, n)
}

func (f *hookFile) Mmap(size int64) ([]byte, error) {
	if err := f.hook(f.ev(OpMmap)); err != nil {
		return nil, err
	}
	return f.f.Mmap(size)
}

func (f *hookFile) Size() (int64, error)  { return f.f.Size() }
func (f *hookFile) Munmap(b []byte) error { return f.f.Munmap(b) }
func (f *hookFile) Name() string          { return f.f.Name() }

func (f *hookFile) Close() error {
	herr := f.hook(f.ev(OpClose))
	err := f.f.Close()
	if herr != nil {
		return herr
	}
	return err
}

// DropUnsynced forwards to the underlying FS's DropUnsynced (MemFS), so
// that fault injection stacked on an intercepted MemFS can drop pending
// writes. It is a no-op on other file systems.
func (h *hookFS) DropUnsynced(name string) {
	if d, ok := h.fs.(interface{ DropUnsynced(string) }); ok {
		d.DropUnsynced(name)
	}
}

// DropUnsynced forwards to the underlying file's DropUnsynced (a MemFS
// file). It is a no-op on other files.
func (f *hookFile) DropUnsynced() {
	if d, ok := f.f.(interface{ DropUnsynced() }); ok {
		d.DropUnsynced()
	}
}
