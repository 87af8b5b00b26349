// Package storefile names the files a store's directory holds.
package storefile

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kdb-project/kdb/vfs"
)

// Is reports whether name is one a store's directory holds or may hold:
// the page file's (db.data, db.redo, db.free, db.free.prev), the lock and
// the journal's segments (db-N.log), with the temporary names they are
// written under (.tmp) and the copies kdbtool repair saves of them
// (.broken, .broken.N, and .broken.tmp left by a killed repair).
func Is(name string) bool {
	name = strings.TrimSuffix(name, ".tmp")
	if i := strings.LastIndex(name, ".broken."); i >= 0 {
		if _, err := strconv.ParseUint(name[i+len(".broken."):], 10, 64); err == nil {
			name = name[:i]
		}
	}
	name = strings.TrimSuffix(strings.TrimSuffix(name, ".broken"), ".tmp")
	switch name {
	case "db.data", "db.redo", "db.free", "db.free.prev", "lock":
		return true
	}
	// A journal segment, db-<N>.log, N canonical decimal from 1 (FORMAT.md
	// §4.1; the journal package parses it the same way, and is above
	// this one).
	num, ok := strings.CutPrefix(name, "db-")
	num, ok2 := strings.CutSuffix(num, ".log")
	if !ok || !ok2 {
		return false
	}
	n, err := strconv.ParseUint(num, 10, 32)
	return err == nil && n > 0 && strconv.FormatUint(n, 10) == num
}

// Above returns the nearest directory above dir (its parent, the
// parent's parent, ... up to the root) that holds a store (a db.data of
// any kind, as kdb.Import tells a store), or "" if none does. The walk
// starts at the nearest of those that exists and is a directory (what does
// not exist yet holds nothing). On the OS file system the path is made
// absolute and its symbolic links resolved first, so that a link to a
// store's directory (or into it) is seen through, as kdb.Import's rename that
// puts the store in place, and kdbtool's new stores, see it.
func Above(fsys vfs.FS, dir string) (string, error) {
	d := filepath.Dir(dir)
	if fsys == vfs.OS {
		abs, err := filepath.Abs(d)
		if err != nil {
			return "", err
		}
		d = abs
	}
	for {
		_, isDir, err := fsys.Stat(d)
		if err == nil && isDir {
			break
		}
		up := filepath.Dir(d)
		if up == d {
			return "", nil
		}
		d = up
	}
	if fsys == vfs.OS {
		real, err := filepath.EvalSymlinks(d)
		if err != nil {
			return "", err
		}
		d = real
	}
	for {
		_, err := vfs.LType(fsys, filepath.Join(d, "db.data"))
		if err == nil {
			return d, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		up := filepath.Dir(d)
		if up == d {
			return "", nil
		}
		d = up
	}
}
