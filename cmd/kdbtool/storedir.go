package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kdb-project/kdb/internal/storefile"
	"github.com/kdb-project/kdb/vfs"
)

// The checks of a directory that a command is about to make a new store in
// (demo, stress; import has kdb.Import's own), shared so that each refuses
// the same directories with the same words.

// dirRefusal is a directory refused for what it is or holds (a usage
// error, exit 2), as opposed to an error reading it (exit 3).
type dirRefusal struct{ msg string }

func (e *dirRefusal) Error() string { return e.msg }

func refuseDir(format string, a ...any) error { return &dirRefusal{fmt.Sprintf(format, a...)} }

// refusalExit is the exit code of err from strayFile or insideStore: 2
// for a refusal, else (an I/O error) 3.
func refusalExit(err error) int {
	var r *dirRefusal
	if errors.As(err, &r) {
		return exitUsage
	}
	return exitIO
}

// strayFile returns an error naming the first entry of ents (dir's, as
// os.ReadDir lists them) that is not a store's file: a regular file whose
// name storefile.Is knows, or the file named mark (a kdbtool mark, such as
// the demo's; "" for none). what ends the message: what to do instead.
// It returns nil if there is none. The error is a dirRefusal.
func strayFile(dir string, ents []os.DirEntry, mark, what string) error {
	for _, e := range ents {
		if e.Type().IsRegular() && (e.Name() == mark || storefile.Is(e.Name())) {
			continue
		}
		return refuseDir("%s holds %s, which is not a store's file: %s", dir, e.Name(), what)
	}
	return nil
}

// insideStore returns an error naming the store if a directory above dir
// (its parent, or one above that, up to the root) holds one (a db.data of
// any kind), as kdb.Import refuses such a dir, with the same walk
// (storefile.Above), dir's own symbolic link resolved first: a store's
// directory holds only the store's own files (Open, repair and Import's
// cleanup take it as flat), and a store made inside it would be copied,
// moved and deleted with it. what ends the message. The refusal is a
// dirRefusal; an error reading a directory is wrapped.
func insideStore(dir, what string) error {
	d := dir
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		d = real // dir itself a link into a store
	}
	store, err := storefile.Above(vfs.OS, d)
	if err != nil {
		return fmt.Errorf("%s: looking for a store above it: %w", dir, err)
	}
	if store != "" {
		return refuseDir("%s is inside the store %s (it holds db.data): a store's directory holds only the store's own files; %s",
			dir, store, what)
	}
	return nil
}

// cwdOrParent reports whether dir is the current directory or one of its
// parents, whatever its name (".", "..", "../here", an absolute path, a
// symbolic link to it): the same directory, by device and inode. A dir
// that does not exist, or a current directory that cannot be found, is
// neither.
func cwdOrParent(dir string) bool {
	if b := filepath.Base(filepath.Clean(dir)); b == "." || b == ".." {
		return true
	}
	target, err := os.Stat(dir)
	if err != nil {
		return false
	}
	wd, err := os.Getwd()
	if err != nil {
		return false
	}
	if real, err := filepath.EvalSymlinks(wd); err == nil {
		wd = real
	}
	for d := wd; ; d = filepath.Dir(d) {
		if st, err := os.Stat(d); err == nil && os.SameFile(st, target) {
			return true
		}
		if filepath.Dir(d) == d {
			return false
		}
	}
}
