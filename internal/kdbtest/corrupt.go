package kdbtest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/kdb-project/kdb/vfs"
)

// modify opens path read-write, runs fn, syncs and closes. The change is
// durable on return (a later crash image keeps it).
func modify(fsys vfs.FS, path string, fn func(f vfs.File) error) (err error) {
	f, err := fsys.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	if err := fn(f); err != nil {
		return err
	}
	return f.Sync()
}

// FlipBit inverts bit (0..7) of the byte at off in path. The byte must
// exist. On return the change is durable.
func FlipBit(fsys vfs.FS, path string, off int64, bit uint) error {
	if bit > 7 {
		return fmt.Errorf("kdbtest: FlipBit %s@%d: bit %d out of range", path, off, bit)
	}
	return modify(fsys, path, func(f vfs.File) error {
		var b [1]byte
		if _, err := f.ReadAt(b[:], off); err != nil {
			return fmt.Errorf("kdbtest: FlipBit %s@%d: %w", path, off, err)
		}
		b[0] ^= 1 << bit
		_, err := f.WriteAt(b[:], off)
		return err
	})
}

// ZeroRange overwrites [off, off+n) of path with zeros. The range must lie
// within the file. On return the change is durable.
func ZeroRange(fsys vfs.FS, path string, off, n int64) error {
	return modify(fsys, path, func(f vfs.File) error {
		size, err := f.Size()
		if err != nil {
			return err
		}
		if off < 0 || n < 0 || off+n > size {
			return fmt.Errorf("kdbtest: ZeroRange %s@%d+%d: beyond size %d", path, off, n, size)
		}
		_, err = f.WriteAt(make([]byte, n), off)
		return err
	})
}

// Truncate sets the size of path (growing pads with zeros). On return the
// change is durable.
func Truncate(fsys vfs.FS, path string, size int64) error {
	return modify(fsys, path, func(f vfs.File) error { return f.Truncate(size) })
}

// CopyFile copies from to to (created 0600 or truncated), syncs it and its
// directory. On return the copy is durable.
func CopyFile(fsys vfs.FS, from, to string) (err error) {
	src, err := fsys.OpenFile(from, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := src.Close(); err == nil {
			err = cerr
		}
	}()
	dst, err := fsys.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	var off int64
	for {
		n, rerr := src.ReadAt(buf, off)
		if n > 0 {
			if _, err := dst.WriteAt(buf[:n], off); err != nil {
				_ = dst.Close()
				return err
			}
			off += int64(n)
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			_ = dst.Close()
			return rerr
		}
	}
	if err := dst.Sync(); err != nil {
		_ = dst.Close()
		return err
	}
	if err := dst.Close(); err != nil {
		return err
	}
	return fsys.SyncDir(filepath.Dir(to))
}
