package kdb

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A store opened by a relative name keeps using its directory after the
// process changes its working directory (as a daemon does): before, every
// new segment, db.free and the checkpoint's files were created by the
// relative name under the new working directory, inside another store of
// that name, and neither store opened again.
func TestOpen_RelativeDirSurvivesChdir(t *testing.T) {
	base := t.TempDir()
	a, b := filepath.Join(base, "A"), filepath.Join(base, "B")
	val := bytes.Repeat([]byte("v"), 3000)
	opts := &Options{SegmentSize: 64 << 10}
	// B/store: a store of its own, closed.
	dbB, err := Open(filepath.Join(b, "store"), opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if err := dbB.Put("b", fmt.Appendf(nil, "b%03d", i), val); err != nil {
			t.Fatal(err)
		}
	}
	if err := dbB.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(a, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(a)
	dbA, err := Open("store", opts)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := dbA.Dir(), filepath.Join(a, "store"); got != want {
		t.Errorf("Dir() = %q, want %q", got, want)
	}
	for i := range 50 {
		if err := dbA.Put("a", fmt.Appendf(nil, "a%03d", i), val); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(b)
	// Past several segments (64 KiB each), then a checkpoint and a close.
	for i := 50; i < 200; i++ {
		if err := dbA.Put("a", fmt.Appendf(nil, "a%03d", i), val); err != nil {
			t.Fatal(err)
		}
	}
	if err := dbA.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if err := dbA.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir, tree, prefix string
		n                 int
	}{{filepath.Join(a, "store"), "a", "a", 200}, {filepath.Join(b, "store"), "b", "b", 50}} {
		db, err := Open(c.dir, nil)
		if err != nil {
			t.Fatalf("reopen %s: %v", c.dir, err)
		}
		if rep := db.Recovery(); rep.FreeListPath != "trusted" {
			t.Errorf("%s: free list %s (%s), want trusted", c.dir, rep.FreeListPath, rep.Reason)
		}
		for i := range c.n {
			if _, err := db.Get(c.tree, fmt.Appendf(nil, "%s%03d", c.prefix, i)); err != nil {
				t.Errorf("%s: key %d: %v", c.dir, i, err)
				break
			}
		}
		if _, err := db.Check(); err != nil {
			t.Errorf("%s: Check: %v", c.dir, err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// Open("") is refused: it used to create a store in the working
// directory, among whatever files are there.
func TestOpen_EmptyDirIsInvalid(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, ro := range []bool{false, true} {
		db, err := Open("", &Options{ReadOnly: ro})
		if !errors.Is(err, ErrInvalid) {
			if db != nil {
				db.Close()
			}
			t.Fatalf("ReadOnly %v: Open(\"\") = %v, want ErrInvalid", ro, err)
		}
	}
	if names, _ := os.ReadDir("."); len(names) != 0 {
		t.Fatalf("Open(\"\") left %d files in the working directory", len(names))
	}
}

// A store's directory given as a symbolic link to nothing is refused
// naming it (it was "mkdir ...: file exists").
func TestOpen_DanglingSymlinkIsNamed(t *testing.T) {
	base := t.TempDir()
	link := filepath.Join(base, "store")
	if err := os.Symlink(filepath.Join(base, "gone"), link); err != nil {
		t.Fatal(err)
	}
	_, err := Open(link, nil)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "symbolic link to nothing") {
		t.Fatalf("Open of a dangling symbolic link: %v", err)
	}
	// And a store under it: the link is named, not the store's directory.
	for _, dir := range []string{filepath.Join(link, "sub"), filepath.Join(link, "a", "b")} {
		_, err := Open(dir, nil)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), link+" is a symbolic link to nothing") {
			t.Fatalf("Open(%s) under a dangling symbolic link: %v", dir, err)
		}
	}
}
