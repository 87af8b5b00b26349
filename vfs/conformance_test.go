package vfs

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// fsCase is one FS under the conformance tests, with a directory to work in.
type fsCase struct {
	name string
	new  func(t *testing.T) (FS, string)
}

var fsCases = []fsCase{
	{"os", func(t *testing.T) (FS, string) { return OS, t.TempDir() }},
	{"mem", func(t *testing.T) (FS, string) {
		m := NewMem()
		if err := m.MkdirAll("/work/dir", 0o700); err != nil {
			t.Fatal(err)
		}
		return m, "/work/dir"
	}},
}

func forEachFS(t *testing.T, fn func(t *testing.T, fsys FS, dir string)) {
	for _, c := range fsCases {
		t.Run(c.name, func(t *testing.T) {
			fsys, dir := c.new(t)
			fn(t, fsys, dir)
		})
	}
}

func mustOpen(t *testing.T, fsys FS, name string, flag int) File {
	t.Helper()
	f, err := fsys.OpenFile(name, flag, 0o600)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	return f
}

func mustClose(t *testing.T, c io.Closer) {
	t.Helper()
	if err := c.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

func mustWrite(t *testing.T, f File, p []byte, off int64) {
	t.Helper()
	if n, err := f.WriteAt(p, off); err != nil || n != len(p) {
		t.Fatalf("WriteAt(%d bytes, %d) = %d, %v", len(p), off, n, err)
	}
}

func readAll(t *testing.T, fsys FS, name string) []byte {
	t.Helper()
	b, err := ReadFile(fsys, name)
	if err != nil {
		t.Fatalf("ReadFile %s: %v", name, err)
	}
	return b
}

func TestFS_WriteReadAt(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys FS, dir string) {
		name := filepath.Join(dir, "f")
		f := mustOpen(t, fsys, name, os.O_RDWR|os.O_CREATE)
		defer mustClose(t, f)
		if f.Name() != name {
			t.Fatalf("Name() = %q, want %q", f.Name(), name)
		}
		mustWrite(t, f, []byte("hello"), 0)
		mustWrite(t, f, []byte("world"), 10) // hole of 5 zero bytes
		if size, err := f.Size(); err != nil || size != 15 {
			t.Fatalf("Size = %d, %v; want 15", size, err)
		}
		buf := make([]byte, 15)
		if n, err := f.ReadAt(buf, 0); n != 15 || (err != nil && err != io.EOF) {
			t.Fatalf("ReadAt = %d, %v", n, err)
		}
		if want := []byte("hello\x00\x00\x00\x00\x00world"); !bytes.Equal(buf, want) {
			t.Fatalf("read %q, want %q", buf, want)
		}
		n, err := f.ReadAt(make([]byte, 10), 10)
		if n != 5 || err != io.EOF {
			t.Fatalf("short ReadAt = %d, %v; want 5, EOF", n, err)
		}
		if n, err := f.ReadAt(make([]byte, 1), 100); n != 0 || err != io.EOF {
			t.Fatalf("ReadAt past end = %d, %v; want 0, EOF", n, err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		if size, isDir, err := fsys.Stat(name); err != nil || size != 15 || isDir {
			t.Fatalf("Stat = %d, %v, %v", size, isDir, err)
		}
	})
}

func TestFS_TruncateAllocate(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys FS, dir string) {
		name := filepath.Join(dir, "f")
		f := mustOpen(t, fsys, name, os.O_RDWR|os.O_CREATE)
		defer mustClose(t, f)
		mustWrite(t, f, bytes.Repeat([]byte{7}, 100), 0)
		if err := f.Truncate(10); err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(20); err != nil {
			t.Fatal(err)
		}
		got := readAll(t, fsys, name)
		want := append(bytes.Repeat([]byte{7}, 10), make([]byte, 10)...)
		if !bytes.Equal(got, want) {
			t.Fatalf("after truncate: %v, want %v", got, want)
		}
		if err := f.Allocate(0, 4096); err != nil {
			t.Fatal(err)
		}
		if size, _ := f.Size(); size != 4096 {
			t.Fatalf("size after Allocate = %d, want 4096", size)
		}
		if err := f.Allocate(0, 100); err != nil { // never shrinks
			t.Fatal(err)
		}
		got = readAll(t, fsys, name)
		if len(got) != 4096 || !bytes.Equal(got[:10], want[:10]) || slices.ContainsFunc(got[10:], func(b byte) bool { return b != 0 }) {
			t.Fatalf("after Allocate: len %d, head %v", len(got), got[:20])
		}
	})
}

func TestFS_MissingFiles(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys FS, dir string) {
		name := filepath.Join(dir, "missing")
		_, err := fsys.OpenFile(name, os.O_RDONLY, 0)
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("open missing: %v", err)
		}
		if _, _, err := fsys.Stat(name); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("stat missing: %v", err)
		}
		if err := fsys.Remove(name); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("remove missing: %v", err)
		}
		if err := fsys.Rename(name, name+"2"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("rename missing: %v", err)
		}
		if _, err := fsys.OpenFile(filepath.Join(dir, "nodir", "f"), os.O_RDWR|os.O_CREATE, 0o600); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("create in missing dir: %v", err)
		}
		if _, err := fsys.ReadDir(filepath.Join(dir, "nodir")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("readdir missing: %v", err)
		}
		if ok, err := Exists(fsys, name); ok || err != nil {
			t.Fatalf("Exists missing = %v, %v", ok, err)
		}
		f := mustOpen(t, fsys, name, os.O_RDWR|os.O_CREATE|os.O_EXCL)
		mustClose(t, f)
		if ok, err := Exists(fsys, name); !ok || err != nil {
			t.Fatalf("Exists = %v, %v", ok, err)
		}
		if _, err := fsys.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); !errors.Is(err, fs.ErrExist) {
			t.Fatalf("O_EXCL on existing: %v", err)
		}
	})
}

func TestFS_DirOps(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys FS, dir string) {
		sub := filepath.Join(dir, "a", "b")
		if err := fsys.MkdirAll(sub, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := fsys.MkdirAll(sub, 0o700); err != nil { // exists: fine
			t.Fatal(err)
		}
		for _, n := range []string{"z", "x", "y"} {
			mustClose(t, mustOpen(t, fsys, filepath.Join(sub, n), os.O_RDWR|os.O_CREATE))
		}
		names, err := fsys.ReadDir(sub)
		if err != nil || !slices.Equal(names, []string{"x", "y", "z"}) {
			t.Fatalf("ReadDir = %v, %v", names, err)
		}
		if _, isDir, err := fsys.Stat(sub); err != nil || !isDir {
			t.Fatalf("Stat dir = %v, %v", isDir, err)
		}
		if err := fsys.Remove(filepath.Join(dir, "a", "b")); err == nil {
			t.Fatal("removed a non-empty directory")
		}
		if err := fsys.Rename(filepath.Join(sub, "x"), filepath.Join(sub, "y")); err != nil {
			t.Fatal(err)
		}
		if names, _ := fsys.ReadDir(sub); !slices.Equal(names, []string{"y", "z"}) {
			t.Fatalf("after rename ReadDir = %v", names)
		}
		if err := fsys.SyncDir(sub); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"y", "z"} {
			if err := fsys.Remove(filepath.Join(sub, n)); err != nil {
				t.Fatal(err)
			}
		}
		if err := fsys.Remove(sub); err != nil {
			t.Fatal(err)
		}
		if err := fsys.SyncDir(filepath.Join(dir, "a")); err != nil {
			t.Fatal(err)
		}
	})
}

func TestFS_RenameReplaces(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys FS, dir string) {
		a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
		for _, c := range []struct{ name, data string }{{a, "new"}, {b, "old"}} {
			f := mustOpen(t, fsys, c.name, os.O_RDWR|os.O_CREATE)
			mustWrite(t, f, []byte(c.data), 0)
			mustClose(t, f)
		}
		if err := fsys.Rename(a, b); err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, fsys, b); string(got) != "new" {
			t.Fatalf("b = %q, want new", got)
		}
		if ok, _ := Exists(fsys, a); ok {
			t.Fatal("a still exists after rename")
		}
	})
}

func TestFS_HandleSurvivesRemove(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys FS, dir string) {
		name := filepath.Join(dir, "f")
		f := mustOpen(t, fsys, name, os.O_RDWR|os.O_CREATE)
		defer mustClose(t, f)
		if err := fsys.Remove(name); err != nil {
			t.Fatal(err)
		}
		mustWrite(t, f, []byte("still"), 0)
		buf := make([]byte, 5)
		if _, err := f.ReadAt(buf, 0); err != nil || string(buf) != "still" {
			t.Fatalf("read after remove: %q, %v", buf, err)
		}
		if ok, _ := Exists(fsys, name); ok {
			t.Fatal("name exists after Remove")
		}
	})
}

func TestFS_Lock(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys FS, dir string) {
		name := filepath.Join(dir, "lock")
		l1, err := fsys.Lock(name)
		if err != nil {
			t.Fatal(err)
		}
		// On OS this is a second open file description in the same
		// process: flock conflicts.
		if _, err := fsys.Lock(name); !errors.Is(err, ErrLocked) {
			t.Fatalf("second Lock: %v, want ErrLocked", err)
		}
		mustClose(t, l1)
		l2, err := fsys.Lock(name)
		if err != nil {
			t.Fatalf("Lock after release: %v", err)
		}
		mustClose(t, l2)
	})
}

func TestFS_WriteFileAtomic(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys FS, dir string) {
		name := filepath.Join(dir, "db.free")
		for _, data := range []string{"first version", "second"} {
			if err := WriteFileAtomic(fsys, name, []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, fsys, name); string(got) != data {
				t.Fatalf("got %q, want %q", got, data)
			}
		}
		names, err := fsys.ReadDir(dir)
		if err != nil || !slices.Equal(names, []string{"db.free"}) {
			t.Fatalf("ReadDir = %v, %v (temporary file left?)", names, err)
		}
	})
}

func TestFS_ClosedFile(t *testing.T) {
	forEachFS(t, func(t *testing.T, fsys FS, dir string) {
		f := mustOpen(t, fsys, filepath.Join(dir, "f"), os.O_RDWR|os.O_CREATE)
		mustClose(t, f)
		if _, err := f.WriteAt([]byte("x"), 0); !errors.Is(err, os.ErrClosed) {
			t.Fatalf("WriteAt after Close: %v", err)
		}
		if _, err := f.ReadAt(make([]byte, 1), 0); !errors.Is(err, os.ErrClosed) {
			t.Fatalf("ReadAt after Close: %v", err)
		}
	})
}
