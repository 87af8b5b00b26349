package vfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteFileAtomic replaces name with data: it writes name+".tmp" (created
// with perm, truncated), syncs and closes it, renames it over name and syncs
// the parent directory. On return name holds data durably; a crash before
// that leaves either the old name or the new one, never a mix. On error the
// temporary file is removed (best effort) and name is untouched or already
// replaced, but not known durable.
func WriteFileAtomic(fsys FS, name string, data []byte, perm os.FileMode) (err error) {
	tmp := name + ".tmp"
	f, err := fsys.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = fsys.Remove(tmp)
		}
	}()
	if _, err = f.WriteAt(data, 0); err != nil {
		_ = f.Close()
		return err
	}
	if err = f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = fsys.Rename(tmp, name); err != nil {
		return err
	}
	return fsys.SyncDir(filepath.Dir(name))
}

// ReadFile returns the whole content of name. It allocates the file's size
// as reported by the file system; callers reading untrusted large files
// should bound it with Stat first.
func ReadFile(fsys FS, name string) (b []byte, err error) {
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	if size < 0 || size != int64(int(size)) {
		return nil, fmt.Errorf("vfs: %s: bad size %d", name, size)
	}
	b = make([]byte, size)
	n, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b[:n], nil
}

// Exists reports whether name exists. Errors other than "not exist" are
// returned.
func Exists(fsys FS, name string) (bool, error) {
	_, _, err := fsys.Stat(name)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, err
}

// MkdirAllDurable creates dir and its missing parents (mode perm before the
// umask) and makes each new entry durable (SyncDir of its parent), so that
// what is created under a new directory tree does not vanish with it in a
// power loss. An existing dir is left as it is.
func MkdirAllDurable(fsys FS, dir string, perm os.FileMode) error {
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		ok, err := Exists(fsys, d)
		if err != nil {
			return err
		}
		if ok {
			break
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if err := fsys.MkdirAll(dir, perm); err != nil {
		return err
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := fsys.SyncDir(filepath.Dir(missing[i])); err != nil {
			return err
		}
	}
	return nil
}

// StoreLockName is the name of a store's lock file in its directory.
const StoreLockName = "lock"

// LockStore takes a store's lock: the lock file dir/lock (created if
// missing) and then, where fsys is a DirLocker (OS), the directory dir
// itself, both exclusive, failing with ErrLocked if either is held
// elsewhere. The lock file alone does not exclude a second writer once
// someone deletes it (the next opener creates a new file and locks that);
// the directory cannot be replaced under a live store. Close releases
// both. A file system that wraps another (a caller already holding the
// lock, a test's hooks) is no DirLocker, and takes the lock file only.
func LockStore(fsys FS, dir string) (Locker, error) {
	file, err := fsys.Lock(filepath.Join(dir, StoreLockName))
	if err != nil {
		return nil, err
	}
	dl, ok := fsys.(DirLocker)
	if !ok {
		return file, nil
	}
	d, err := dl.LockDir(dir)
	if err != nil {
		_ = file.Close()
		return nil, err
	}
	return storeLock{dir: d, file: file}, nil
}

type storeLock struct{ dir, file Locker }

func (l storeLock) Close() error {
	err := l.dir.Close()
	if ferr := l.file.Close(); err == nil {
		err = ferr
	}
	return err
}

// FileKind names the kind of file of mode m (type bits, as an Lstat or
// LType gives them), for an error: "a directory", "a symbolic link", "a
// FIFO".
func FileKind(m os.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m&os.ModeSymlink != 0:
		return "a symbolic link"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	}
	return "a " + m.Type().String()
}
